//! What cloud-config's `RoleARN`/`SourceARN` and `[ServiceOverride]` change in the SDK clients:
//! credentials from STS AssumeRole with upstream's `x-amz-source-*` headers, and a fixed
//! endpoint (URL, signing region and name) per service.

use std::time::SystemTime;

use aws_config::SdkConfig;
use aws_credential_types::{
    Credentials,
    provider::{self, ProvideCredentials, SharedCredentialsProvider, error::CredentialsError},
};
use aws_smithy_runtime_api::client::endpoint::{
    EndpointFuture, EndpointResolverParams, ResolveEndpoint, SharedEndpointResolver,
};
use aws_smithy_types::endpoint::{Endpoint, EndpointAuthScheme};

use crate::config::{AwsService, ServiceEndpoint, role_account};

/// The session name of the assumed role, as CloudTrail shows it.
pub const SESSION_NAME: &str = "cloud-gateway";
/// Header carrying the role's account on AssumeRole (upstream always sends it).
pub const SOURCE_ACCOUNT_HEADER: &str = "x-amz-source-account";
/// Header carrying cloud-config `SourceARN` on AssumeRole.
pub const SOURCE_ARN_HEADER: &str = "x-amz-source-arn";

/// Credentials of an assumed role: STS AssumeRole with the base credentials of the SDK
/// configuration it was built from. The clients' identity cache keeps them until shortly before
/// they expire, then this asks again.
#[derive(Debug)]
pub struct AssumeRole {
    sts: aws_sdk_sts::Client,
    role_arn: String,
    headers: Vec<(&'static str, String)>,
}

impl AssumeRole {
    /// A provider assuming `role_arn` with `base`'s credentials, STS in `region`.
    pub fn new(
        base: &SdkConfig,
        region: &str,
        role_arn: &str,
        source_arn: Option<&str>,
    ) -> Result<Self, String> {
        let account = role_account(role_arn)?;
        let sts = aws_sdk_sts::config::Builder::from(base)
            .region(aws_sdk_sts::config::Region::new(region.to_owned()))
            .build();
        let mut headers = vec![(SOURCE_ACCOUNT_HEADER, account.to_owned())];
        if let Some(arn) = source_arn {
            headers.push((SOURCE_ARN_HEADER, arn.to_owned()));
        }
        Ok(Self {
            sts: aws_sdk_sts::Client::from_conf(sts),
            role_arn: role_arn.to_owned(),
            headers,
        })
    }

    async fn assume(&self) -> provider::Result {
        let headers = self.headers.clone();
        let out = self
            .sts
            .assume_role()
            .role_arn(&self.role_arn)
            .role_session_name(SESSION_NAME)
            .customize()
            .mutate_request(move |req| {
                for (name, value) in &headers {
                    req.headers_mut().insert(*name, value.clone());
                }
            })
            .send()
            .await
            .map_err(|e| {
                CredentialsError::provider_error(format!(
                    "STS AssumeRole of {}: {}",
                    self.role_arn,
                    aws_smithy_types::error::display::DisplayErrorContext(&e)
                ))
            })?;
        let creds = out.credentials.ok_or_else(|| {
            CredentialsError::provider_error(format!(
                "STS AssumeRole of {} returned no credentials",
                self.role_arn
            ))
        })?;
        let expiry = SystemTime::try_from(*creds.expiration())
            .map_err(|e| CredentialsError::provider_error(format!("STS AssumeRole expiry: {e}")))?;
        Ok(Credentials::new(
            creds.access_key_id(),
            creds.secret_access_key(),
            Some(creds.session_token().to_owned()),
            Some(expiry),
            "AssumeRole",
        ))
    }

    /// Shared, for the clients' configurations.
    pub fn shared(self) -> SharedCredentialsProvider {
        SharedCredentialsProvider::new(self)
    }
}

impl ProvideCredentials for AssumeRole {
    fn provide_credentials<'a>(&'a self) -> provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        provider::future::ProvideCredentials::new(self.assume())
    }
}

/// An endpoint resolver answering one URL, signed for the given region and name (as upstream's
/// per-service resolvers with `WithSigV4SigningRegion`/`WithSigV4SigningName`).
#[derive(Debug)]
struct FixedEndpoint(Endpoint);

impl ResolveEndpoint for FixedEndpoint {
    fn resolve_endpoint<'a>(&'a self, _params: &'a EndpointResolverParams) -> EndpointFuture<'a> {
        EndpointFuture::ready(Ok(self.0.clone()))
    }
}

/// The endpoint resolver for `service` in `region`, if an override applies there.
pub fn endpoint_resolver(
    endpoints: &[ServiceEndpoint],
    service: AwsService,
    region: &str,
) -> Option<SharedEndpointResolver> {
    let e = endpoints
        .iter()
        .find(|e| e.service == service && e.region == region)?;
    let signing_name = e
        .signing_name
        .clone()
        .unwrap_or_else(|| service.signing_name().to_owned());
    let scheme = EndpointAuthScheme::with_capacity("sigv4", 2)
        .put("signingName", signing_name)
        .put("signingRegion", e.signing_region.clone());
    let endpoint = Endpoint::builder().url(e.url.clone()).auth_scheme(scheme).build();
    Some(SharedEndpointResolver::new(FixedEndpoint(endpoint)))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use aws_sdk_ec2::config::Credentials as StaticCredentials;
    use provider::{Instances, NodeRef};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::{AwsConfig, AwsProvider, config::AwsService, config::ServiceEndpoint};

    const ASSUMED: &str = "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleResult>\
        <Credentials><AccessKeyId>ASIAASSUMED</AccessKeyId><SecretAccessKey>secret</SecretAccessKey>\
        <SessionToken>token</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials>\
        <AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/ccm/cloud-gateway</Arn>\
        <AssumedRoleId>AROA:cloud-gateway</AssumedRoleId></AssumedRoleUser></AssumeRoleResult>\
        </AssumeRoleResponse>";
    const NO_INSTANCES: &str = "<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
        <requestId>r</requestId><reservationSet/></DescribeInstancesResponse>";

    /// A request as the server saw it: its head (request line and headers, lowercased) and body.
    type Seen = Arc<Mutex<Vec<(String, String)>>>;

    /// An HTTP/1.1 server on loopback answering AssumeRole and DescribeInstances.
    async fn server() -> (String, Seen) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Seen = Arc::default();
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 4096];
                        let Ok(n) = socket.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let head = text[..end].to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if buf.len() < end + 4 + length {
                            continue;
                        }
                        let body = text[end + 4..end + 4 + length].to_owned();
                        let reply = if body.contains("Action=AssumeRole") {
                            ASSUMED
                        } else {
                            NO_INSTANCES
                        };
                        record.lock().unwrap().push((head, body));
                        let response = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/xml\r\ncontent-length: {}\r\n\r\n{reply}",
                            reply.len()
                        );
                        let _ = socket.write_all(response.as_bytes()).await;
                        buf.drain(..end + 4 + length);
                    }
                });
            }
        });
        (url, seen)
    }

    async fn provider(config: AwsConfig) -> Arc<AwsProvider> {
        let sdk = config
            .sdk_loader()
            .unwrap()
            .credentials_provider(StaticCredentials::new(
                "AKIABASE",
                "base-secret",
                None,
                None,
                "test",
            ))
            .load()
            .await;
        AwsProvider::with_sdk_config(config, &sdk).unwrap()
    }

    fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")).map(str::trim))
    }

    const NODE: &str = "aws:///eu-west-1a/i-0123456789abcdef0";

    #[tokio::test]
    async fn role_arn_assumes_the_role_with_the_source_headers_and_calls_with_its_credentials() {
        let (url, seen) = server().await;
        let p = provider(AwsConfig {
            region: "eu-west-1".into(),
            endpoint_url: Some(url),
            max_attempts: 1,
            role_arn: Some("arn:aws:iam::123456789012:role/ccm".into()),
            source_arn: Some("arn:aws:eks:eu-west-1:123456789012:cluster/prod".into()),
            ..AwsConfig::default()
        })
        .await;
        p.lookup_instances(&[NodeRef::new("n", NODE)]).await.unwrap();
        p.lookup_instances(&[NodeRef::new("n", NODE)]).await.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            3,
            "one AssumeRole, then two calls on its cached credentials: {seen:#?}"
        );
        let (head, body) = &seen[0];
        assert!(body.contains("Action=AssumeRole"), "{body}");
        assert!(
            body.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fccm"),
            "{body}"
        );
        assert!(body.contains("RoleSessionName=cloud-gateway"), "{body}");
        assert_eq!(header(head, "x-amz-source-account"), Some("123456789012"));
        assert_eq!(
            header(head, "x-amz-source-arn"),
            Some("arn:aws:eks:eu-west-1:123456789012:cluster/prod")
        );
        assert!(
            header(head, "authorization")
                .unwrap()
                .contains("credential=akiabase/"),
            "{head}"
        );
        for (head, body) in &seen[1..] {
            assert!(body.contains("Action=DescribeInstances"), "{body}");
            assert!(
                header(head, "authorization")
                    .unwrap()
                    .contains("credential=asiaassumed/"),
                "{head}"
            );
            assert_eq!(header(head, "x-amz-security-token"), Some("token"));
            assert_eq!(header(head, "x-amz-source-arn"), None);
        }
    }

    #[tokio::test]
    async fn a_service_override_of_the_region_sets_url_signing_region_and_name() {
        let (url, seen) = server().await;
        let endpoint = |region: &str, url: String| ServiceEndpoint {
            service: AwsService::Ec2,
            region: region.into(),
            url,
            signing_region: "custom-region".into(),
            signing_name: Some("custom-service".into()),
        };
        let p = provider(AwsConfig {
            region: "eu-west-1".into(),
            // Unreachable: only the override's URL may be called.
            endpoint_url: Some("http://127.0.0.1:9".into()),
            max_attempts: 1,
            service_endpoints: vec![
                endpoint("us-east-1", "http://127.0.0.1:9".into()),
                endpoint("eu-west-1", url),
            ],
            ..AwsConfig::default()
        })
        .await;
        p.lookup_instances(&[NodeRef::new("n", NODE)]).await.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:#?}");
        let auth = header(&seen[0].0, "authorization").unwrap();
        assert!(
            auth.contains("/custom-region/custom-service/aws4_request"),
            "{auth}"
        );

        // Without a signing name, the service's own; signed for the signing region.
        let (url, seen) = server().await;
        let p = provider(AwsConfig {
            region: "eu-west-1".into(),
            max_attempts: 1,
            service_endpoints: vec![ServiceEndpoint {
                signing_name: None,
                ..endpoint("eu-west-1", url)
            }],
            ..AwsConfig::default()
        })
        .await;
        p.lookup_instances(&[NodeRef::new("n", NODE)]).await.unwrap();
        let auth = header(&seen.lock().unwrap()[0].0, "authorization")
            .unwrap()
            .to_owned();
        assert!(auth.contains("/custom-region/ec2/aws4_request"), "{auth}");
    }
}
