//! A project's Nova and Neutron quotas lifted for a bench (set to -1, unlimited), and put back
//! as they were afterwards.

use provider_openstack::client::{Client, Service};
use serde_json::{Map, Value};

/// One API's quotas: where they are and how its bodies are keyed.
struct Api {
    service: Service,
    path: String,
    key: &'static str,
    saved: Value,
}

/// Quotas lifted; [`LiftedQuotas::restore`] puts them back.
pub struct LiftedQuotas {
    apis: Vec<Api>,
}

impl LiftedQuotas {
    /// Lifts `nova` (os-quota-sets keys: `instances`, `cores`, `ram`…) and `neutron` (`port`,
    /// `floatingip`…) of `project`, through an admin client; an empty list leaves that API alone.
    ///
    /// # Panics
    /// A quota API failing (a bench cannot run on the quotas it found).
    pub async fn lift(admin: &Client, project: &str, nova: &[&str], neutron: &[&str]) -> Self {
        let mut apis = Vec::new();
        for (service, path, key, names) in [
            (Service::Compute, "os-quota-sets", "quota_set", nova),
            (Service::Network, "quotas", "quota", neutron),
        ] {
            if names.is_empty() {
                continue;
            }
            let path = format!("/{path}/{project}");
            let now: Value = admin
                .get(service, &path)
                .send_json()
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            let pick = |value: &dyn Fn(&str) -> Value| -> Value {
                let quotas: Map<String, Value> = names.iter().map(|n| ((*n).to_owned(), value(n))).collect();
                Value::Object(Map::from_iter([(key.to_owned(), Value::Object(quotas))]))
            };
            let api = Api {
                service,
                path,
                key,
                saved: pick(&|n| now[key][n].clone()),
            };
            api.set(admin, &pick(&|_| Value::from(-1))).await;
            apis.push(api);
        }
        Self { apis }
    }

    /// Puts the quotas back as they were.
    pub async fn restore(&self, admin: &Client) {
        for api in &self.apis {
            api.set(admin, &api.saved).await;
        }
    }
}

impl Api {
    async fn set(&self, admin: &Client, body: &Value) {
        admin
            .put(self.service, &self.path)
            .json(body)
            .send_empty()
            .await
            .unwrap_or_else(|e| panic!("setting {} ({}): {e}", self.path, self.key));
    }
}
