//! The vim25 methods this provider calls: their request bodies, and their answers read from
//! the [`Element`] tree.

use super::{Client, SoapError, xml::Element, xml::escape};
use crate::credentials::Credential;

/// A managed object reference (`<obj type="VirtualMachine">vm-42</obj>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Moref {
    /// Its type.
    pub kind: String,
    /// Its id.
    pub value: String,
}

impl Moref {
    /// A reference.
    pub fn new(kind: &str, value: &str) -> Self {
        Self {
            kind: kind.into(),
            value: value.into(),
        }
    }

    /// The reference an element holds (`type` attribute, id as text).
    pub fn from(e: &Element) -> Option<Self> {
        Some(Self::new(e.ref_type.as_deref()?, e.text.trim()))
    }

    fn xml(&self, tag: &str) -> String {
        format!(
            "<{tag} type=\"{}\">{}</{tag}>",
            escape(&self.kind),
            escape(&self.value)
        )
    }
}

/// The objects of the service content this client uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceContent {
    /// The inventory's root folder.
    pub root_folder: Moref,
    /// The property collector.
    pub property_collector: Moref,
    /// The search index.
    pub search_index: Moref,
    /// The session manager.
    pub session_manager: Moref,
    /// The view manager (ContainerViews over the VMs).
    pub view_manager: Moref,
}

/// A SOAP fault's type, message and (ManagedObjectNotFound) object.
pub fn fault(fault: &Element) -> SoapError {
    let message = fault.text_of("faultstring").unwrap_or_default().to_owned();
    let detail = fault.child("detail").and_then(|d| d.children.first());
    let kind = detail
        .map(|d| {
            d.xsi_type
                .clone()
                .unwrap_or_else(|| d.name.strip_suffix("Fault").unwrap_or(&d.name).to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let object = detail.and_then(|d| d.child("obj")).and_then(Moref::from);
    SoapError::Fault {
        kind,
        message,
        object,
    }
}

fn method(name: &str, this: &Moref, rest: &str) -> String {
    format!("<{name} xmlns=\"urn:vim25\">{}{rest}</{name}>", this.xml("_this"))
}

/// `RetrieveServiceContent`.
pub fn retrieve_service_content() -> String {
    method(
        "RetrieveServiceContent",
        &Moref::new("ServiceInstance", "ServiceInstance"),
        "",
    )
}

/// Reads `RetrieveServiceContentResponse`.
pub fn service_content(body: &Element) -> Result<ServiceContent, SoapError> {
    let rv = body
        .child("returnval")
        .ok_or_else(|| SoapError::Decode("RetrieveServiceContent: no returnval".into()))?;
    let get = |name: &str| {
        rv.child(name)
            .and_then(Moref::from)
            .ok_or_else(|| SoapError::Decode(format!("RetrieveServiceContent: no {name}")))
    };
    Ok(ServiceContent {
        root_folder: get("rootFolder")?,
        property_collector: get("propertyCollector")?,
        search_index: get("searchIndex")?,
        session_manager: get("sessionManager")?,
        view_manager: get("viewManager")?,
    })
}

/// `Login`.
pub fn login(content: &ServiceContent, credential: &Credential) -> String {
    method(
        "Login",
        &content.session_manager,
        &format!(
            "<userName>{}</userName><password>{}</password>",
            escape(&credential.user),
            escape(&credential.password.0)
        ),
    )
}

/// `Logout`.
pub fn logout(content: &ServiceContent) -> String {
    method("Logout", &content.session_manager, "")
}

fn scope(datacenter: Option<&Moref>) -> String {
    datacenter.map(|dc| dc.xml("datacenter")).unwrap_or_default()
}

/// One property of one object; `None` for a property vCenter did not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectContent {
    /// The object.
    pub obj: Option<Moref>,
    /// Its properties by path, as returned.
    pub props: Vec<(String, Element)>,
    /// Paths vCenter could not read, with the fault's type.
    pub missing: Vec<(String, String)>,
}

impl ObjectContent {
    /// A property's value element.
    pub fn prop(&self, path: &str) -> Option<&Element> {
        self.props.iter().find(|(p, _)| p == path).map(|(_, v)| v)
    }

    /// A property's text (`""` when unset).
    pub fn text(&self, path: &str) -> &str {
        self.prop(path).map(|v| v.text.trim()).unwrap_or_default()
    }
}

fn objects(rv: &Element) -> Vec<ObjectContent> {
    rv.all("objects")
        .map(|o| ObjectContent {
            obj: o.child("obj").and_then(Moref::from),
            props: o
                .all("propSet")
                .filter_map(|p| Some((p.text_of("name")?.to_owned(), p.child("val")?.clone())))
                .collect(),
            missing: o
                .all("missingSet")
                .map(|m| {
                    let kind = m
                        .path(&["fault", "fault"])
                        .and_then(|f| f.xsi_type.clone())
                        .unwrap_or_else(|| "unknown".into());
                    (m.text_of("path").unwrap_or_default().to_owned(), kind)
                })
                .collect(),
        })
        .collect()
}

impl Client {
    /// `FindByUuid` for a VM's BIOS UUID, in `datacenter` or the whole inventory.
    pub async fn find_by_uuid(
        &self,
        datacenter: Option<&Moref>,
        uuid: &str,
    ) -> Result<Option<Moref>, SoapError> {
        let content = self.content().await?.clone();
        let body = method(
            "FindByUuid",
            &content.search_index,
            &format!(
                "{}<uuid>{}</uuid><vmSearch>true</vmSearch><instanceUuid>false</instanceUuid>",
                scope(datacenter),
                escape(uuid)
            ),
        );
        Ok(self.call(&body).await?.child("returnval").and_then(Moref::from))
    }

    /// `FindAllByDnsName`: VMs whose tools report `name` as `guest.hostName`.
    pub async fn find_all_by_dns_name(
        &self,
        datacenter: Option<&Moref>,
        name: &str,
    ) -> Result<Vec<Moref>, SoapError> {
        let content = self.content().await?.clone();
        let body = method(
            "FindAllByDnsName",
            &content.search_index,
            &format!(
                "{}<dnsName>{}</dnsName><vmSearch>true</vmSearch>",
                scope(datacenter),
                escape(name)
            ),
        );
        Ok(self
            .call(&body)
            .await?
            .all("returnval")
            .filter_map(Moref::from)
            .collect())
    }

    /// `FindByIp`: a VM whose tools report `ip`.
    pub async fn find_by_ip(&self, datacenter: Option<&Moref>, ip: &str) -> Result<Option<Moref>, SoapError> {
        let content = self.content().await?.clone();
        let body = method(
            "FindByIp",
            &content.search_index,
            &format!(
                "{}<ip>{}</ip><vmSearch>true</vmSearch>",
                scope(datacenter),
                escape(ip)
            ),
        );
        Ok(self.call(&body).await?.child("returnval").and_then(Moref::from))
    }

    /// `RetrievePropertiesEx` of `paths` of every object in `objects` (of type `kind`) in one
    /// call, and its continuations. An object that no longer exists makes vCenter fail the whole
    /// call with ManagedObjectNotFound naming it: it is left out, the call repeated, and it is
    /// returned in the second list.
    pub async fn retrieve(
        &self,
        kind: &str,
        objects_wanted: &[Moref],
        paths: &[&str],
    ) -> Result<(Vec<ObjectContent>, Vec<Moref>), SoapError> {
        let mut wanted: Vec<Moref> = objects_wanted.to_vec();
        let mut gone = Vec::new();
        loop {
            if wanted.is_empty() {
                return Ok((Vec::new(), gone));
            }
            let prop_set = format!(
                "<propSet><type>{}</type>{}</propSet>",
                escape(kind),
                paths
                    .iter()
                    .map(|p| format!("<pathSet>{}</pathSet>", escape(p)))
                    .collect::<String>()
            );
            let object_set: String = wanted
                .iter()
                .map(|o| format!("<objectSet>{}<skip>false</skip></objectSet>", o.xml("obj")))
                .collect();
            match self
                .retrieve_spec(&format!("<specSet>{prop_set}{object_set}</specSet>"))
                .await
            {
                Ok(found) => return Ok((found, gone)),
                Err(SoapError::Fault {
                    kind,
                    object: Some(obj),
                    ..
                }) if kind == "ManagedObjectNotFound" && wanted.contains(&obj) => {
                    wanted.retain(|o| *o != obj);
                    gone.push(obj);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The parent of every object in `objects` and of each of their ancestors up to the root
    /// folder, in one RetrievePropertiesEx (govmomi's `mo.Ancestors` traversal): where zones
    /// and regions are looked up from ([`crate::zones`]).
    pub async fn parents(
        &self,
        objects: &[Moref],
    ) -> Result<std::collections::HashMap<Moref, Moref>, SoapError> {
        if objects.is_empty() {
            return Ok(Default::default());
        }
        let up = "<selectSet xsi:type=\"TraversalSpec\"><name>up</name><type>ManagedEntity</type><path>parent</path><skip>false</skip><selectSet><name>up</name></selectSet></selectSet>";
        let object_set: String = objects
            .iter()
            .map(|o| format!("<objectSet>{}<skip>false</skip>{up}</objectSet>", o.xml("obj")))
            .collect();
        let spec = format!(
            "<specSet><propSet><type>ManagedEntity</type><pathSet>parent</pathSet></propSet>{object_set}</specSet>"
        );
        Ok(self
            .retrieve_spec(&spec)
            .await?
            .into_iter()
            .filter_map(|o| Some((o.obj.clone()?, Moref::from(o.prop("parent")?)?)))
            .collect())
    }

    /// `CreateContainerView`: a view of every VM under `container` (a folder or a datacenter),
    /// nested folders, vApps and pools included. It lives as long as the session.
    pub async fn create_vm_view(&self, container: &Moref) -> Result<Moref, SoapError> {
        let content = self.content().await?.clone();
        let body = method(
            "CreateContainerView",
            &content.view_manager,
            &format!(
                "{}<type>VirtualMachine</type><recursive>true</recursive>",
                container.xml("container")
            ),
        );
        self.call(&body)
            .await?
            .child("returnval")
            .and_then(Moref::from)
            .ok_or_else(|| SoapError::Decode("CreateContainerView: no view".into()))
    }

    /// `paths` of every VM in `views`, in one RetrievePropertiesEx (and its continuations).
    /// A view vCenter no longer has (its session ended) fails the call with
    /// ManagedObjectNotFound naming it.
    pub async fn retrieve_views(
        &self,
        views: &[Moref],
        paths: &[&str],
    ) -> Result<Vec<ObjectContent>, SoapError> {
        let prop_set = format!(
            "<propSet><type>VirtualMachine</type>{}</propSet>",
            paths
                .iter()
                .map(|p| format!("<pathSet>{}</pathSet>", escape(p)))
                .collect::<String>()
        );
        let object_set: String = views
            .iter()
            .map(|v| {
                format!(
                    "<objectSet>{}<skip>true</skip><selectSet xsi:type=\"TraversalSpec\"><name>view</name><type>ContainerView</type><path>view</path><skip>false</skip></selectSet></objectSet>",
                    v.xml("obj")
                )
            })
            .collect();
        self.retrieve_spec(&format!("<specSet>{prop_set}{object_set}</specSet>"))
            .await
    }

    /// Every datacenter under the root folder (through nested folders), with its name.
    pub async fn datacenters(&self) -> Result<Vec<(Moref, String)>, SoapError> {
        let content = self.content().await?.clone();
        let spec = format!(
            "<specSet><propSet><type>Datacenter</type><pathSet>name</pathSet></propSet><objectSet>{}<skip>false</skip><selectSet xsi:type=\"TraversalSpec\"><name>folders</name><type>Folder</type><path>childEntity</path><skip>false</skip><selectSet><name>folders</name></selectSet></selectSet></objectSet></specSet>",
            content.root_folder.xml("obj")
        );
        Ok(self
            .retrieve_spec(&spec)
            .await?
            .into_iter()
            .filter_map(|o| {
                let name = o.text("name").to_owned();
                Some((o.obj?, name))
            })
            .filter(|(m, _)| m.kind == "Datacenter")
            .collect())
    }

    async fn retrieve_spec(&self, spec: &str) -> Result<Vec<ObjectContent>, SoapError> {
        let content = self.content().await?.clone();
        let collector = &content.property_collector;
        let body = method("RetrievePropertiesEx", collector, &format!("{spec}<options/>"));
        let forgot = |answer: &Element| {
            answer.child("returnval").is_some_and(|rv| {
                objects(rv)
                    .iter()
                    .any(|o| o.missing.iter().any(|(_, fault)| fault == "NotAuthenticated"))
            })
        };
        let mut answer = self.call_checked(&body, forgot).await?;
        let mut out = Vec::new();
        loop {
            let Some(rv) = answer.child("returnval") else {
                return Ok(out);
            };
            out.extend(objects(rv));
            let Some(token) = rv.text_of("token").filter(|t| !t.trim().is_empty()) else {
                return Ok(out);
            };
            let body = method(
                "ContinueRetrievePropertiesEx",
                collector,
                &format!("<token>{}</token>", escape(token.trim())),
            );
            answer = self.call(&body).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soap::xml::parse;

    #[test]
    fn faults_are_read_by_their_type() {
        let doc = parse(r#"<Fault><faultcode>ServerFaultCode</faultcode><faultstring>The object has already been deleted</faultstring><detail><ManagedObjectNotFoundFault xmlns:xsi="x" xsi:type="ManagedObjectNotFound"><obj type="VirtualMachine">vm-9</obj></ManagedObjectNotFoundFault></detail></Fault>"#).unwrap();
        assert_eq!(
            fault(&doc),
            SoapError::Fault {
                kind: "ManagedObjectNotFound".into(),
                message: "The object has already been deleted".into(),
                object: Some(Moref::new("VirtualMachine", "vm-9")),
            }
        );
        let doc =
            parse("<Fault><faultstring>x</faultstring><detail><NotAuthenticatedFault/></detail></Fault>")
                .unwrap();
        assert_eq!(fault(&doc).fault(), Some("NotAuthenticated"));
        let doc = parse("<Fault></Fault>").unwrap();
        assert_eq!(fault(&doc).fault(), Some("unknown"));
    }

    #[test]
    fn requests_escape_what_they_carry() {
        let content = ServiceContent {
            root_folder: Moref::new("Folder", "group-d1"),
            property_collector: Moref::new("PropertyCollector", "propertyCollector"),
            search_index: Moref::new("SearchIndex", "SearchIndex"),
            session_manager: Moref::new("SessionManager", "SessionManager"),
            view_manager: Moref::new("ViewManager", "ViewManager"),
        };
        let body = login(
            &content,
            &Credential {
                user: "a<b".into(),
                password: crate::config::Secret("p&\"".into()),
            },
        );
        assert!(body.contains("<userName>a&lt;b</userName>"), "{body}");
        assert!(body.contains("<password>p&amp;&quot;</password>"), "{body}");
        assert!(parse(&body).is_ok());
    }
}
