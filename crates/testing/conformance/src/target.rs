//! The gateway under test: where it listens, how to reach it (plain text or TLS), and where its
//! `/metrics` are, if anywhere.

use std::{path::PathBuf, time::Duration};

use gateway_api::{
    caller::NameCaller,
    v1::{
        identity_client::IdentityClient, instances_client::InstancesClient,
        load_balancers_client::LoadBalancersClient, routes_client::RoutesClient,
    },
};
use tonic::{
    service::interceptor::InterceptedService,
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
};

/// TLS settings, as the controllers take them: the CA that signed the gateway's certificate,
/// optionally a client certificate (mutual TLS) and the name to verify.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// PEM CA bundle that signed the gateway's certificate.
    pub ca_file: PathBuf,
    /// PEM client certificate and its private key, for mutual TLS.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// Name to verify in the gateway's certificate; the address's host when unset.
    pub server_name: Option<String>,
}

impl TlsFiles {
    fn config(&self) -> Result<ClientTlsConfig, String> {
        let read = |path: &PathBuf| std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()));
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&self.ca_file)?));
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(name) = &self.server_name {
            tls = tls.domain_name(name.clone());
        }
        Ok(tls)
    }
}

/// A gateway at an address.
#[derive(Debug, Clone)]
pub struct Target {
    endpoint: String,
    tls: Option<ClientTlsConfig>,
    metrics_url: Option<String>,
    call_timeout: Duration,
}

impl Target {
    /// A gateway serving plain-text gRPC at `address` (`host:port` or `http://host:port`).
    pub fn plaintext(address: &str) -> Self {
        let endpoint = if address.contains("://") {
            address.to_owned()
        } else {
            format!("http://{address}")
        };
        Self {
            endpoint,
            tls: None,
            metrics_url: None,
            call_timeout: Duration::from_secs(30),
        }
    }

    /// A gateway serving gRPC over TLS at `address` (`host:port` or `https://host:port`).
    pub fn tls(address: &str, files: &TlsFiles) -> Result<Self, String> {
        let endpoint = match address.split_once("://") {
            Some(("https", _)) => address.to_owned(),
            Some((scheme, _)) => return Err(format!("TLS needs an https:// address, got {scheme}://")),
            None => format!("https://{address}"),
        };
        let tls = files.config()?;
        // Certificates and keys are checked now, not at the first case.
        Endpoint::from_shared(endpoint.clone())
            .map_err(|e| format!("invalid gateway address {endpoint:?}: {e}"))?
            .tls_config(tls.clone())
            .map_err(|e| format!("TLS settings: {e:?}"))?;
        Ok(Self {
            endpoint,
            tls: Some(tls),
            metrics_url: None,
            call_timeout: Duration::from_secs(30),
        })
    }

    /// Where the gateway serves Prometheus text (`http://host:port/metrics`), for the cases that
    /// read it.
    pub fn with_metrics_url(mut self, url: impl Into<String>) -> Self {
        self.metrics_url = Some(url.into());
        self
    }

    /// Deadline of each call (default 30 s): a gateway that never answers fails the case.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The gRPC endpoint URI.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The `/metrics` URL, when known.
    pub fn metrics_url(&self) -> Option<&str> {
        self.metrics_url.as_deref()
    }

    /// A connected channel; panics (the case fails) when the gateway cannot be reached.
    pub async fn channel(&self) -> Channel {
        let mut endpoint = Endpoint::from_shared(self.endpoint.clone())
            .unwrap_or_else(|e| panic!("invalid gateway address {:?}: {e}", self.endpoint))
            .connect_timeout(Duration::from_secs(5))
            .timeout(self.call_timeout);
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.clone())
                .unwrap_or_else(|e| panic!("TLS settings: {e:?}"));
        }
        endpoint
            .connect()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the gateway at {}: {e:?}", self.endpoint))
    }

    /// Clients that name themselves `caller` (in the `x-cloudgateway-caller` header).
    pub async fn clients(&self, caller: &str) -> Clients {
        Clients::over(self.channel().await, caller)
    }
}

type Svc = InterceptedService<Channel, NameCaller>;

/// The four service clients on one connection.
#[derive(Clone)]
pub struct Clients {
    /// Identity service.
    pub identity: IdentityClient<Svc>,
    /// Instances service.
    pub instances: InstancesClient<Svc>,
    /// Load balancers service.
    pub load_balancers: LoadBalancersClient<Svc>,
    /// Routes service.
    pub routes: RoutesClient<Svc>,
    /// The raw channel, for hand-made requests.
    pub channel: Channel,
}

impl Clients {
    /// Connects to the plain-text `endpoint` as `caller`.
    pub async fn connect(endpoint: &str, caller: &str) -> Self {
        Target::plaintext(endpoint).clients(caller).await
    }

    /// Clients on `channel` (e.g. a TLS one), naming themselves `caller` in the header.
    pub fn over(channel: Channel, caller: &str) -> Self {
        let name = NameCaller::new(caller).expect("caller is ASCII");
        Self {
            identity: IdentityClient::with_interceptor(channel.clone(), name.clone()),
            instances: InstancesClient::with_interceptor(channel.clone(), name.clone()),
            load_balancers: LoadBalancersClient::with_interceptor(channel.clone(), name.clone()),
            routes: RoutesClient::with_interceptor(channel.clone(), name),
            channel,
        }
    }
}

/// `GET url` over plain HTTP/1.0 (enough for a `/metrics` page): the body of a 200 answer.
pub async fn http_get(url: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let uri: http::Uri = url.parse().map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("{url}: only http:// URLs are supported"));
    }
    let authority = uri.authority().ok_or_else(|| format!("{url}: no host"))?;
    let host_port = format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80));
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let io = async {
        let mut stream = tokio::net::TcpStream::connect(&host_port).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\nAccept: text/plain\r\n\r\n").as_bytes(),
            )
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| format!("GET {url}: no answer within 10s"))?
        .map_err(|e| format!("GET {url}: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {url}: not an HTTP answer"))?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        return Err(format!("GET {url}: HTTP {status}"));
    }
    Ok(body.to_owned())
}
