//! SOAP responses as a small tree of elements (local names, `xsi:type`, text), read with
//! quick-xml: vSphere's answers are a few kilobytes, and a tree lets each method pick what it
//! needs by path instead of a streaming state machine per method.

use quick_xml::{events::Event, reader::Reader};

/// One element.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    /// Local name (no namespace prefix).
    pub name: String,
    /// `xsi:type`, when given (e.g. `ArrayOfGuestNicInfo`, `NotAuthenticated`).
    pub xsi_type: Option<String>,
    /// `type` (a managed object reference's type, e.g. `VirtualMachine`).
    pub ref_type: Option<String>,
    /// The text directly inside it.
    pub text: String,
    /// Its child elements in order.
    pub children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The element at a path of child names.
    pub fn path(&self, names: &[&str]) -> Option<&Element> {
        names.iter().try_fold(self, |e, n| e.child(n))
    }

    /// The text of the child named `name`.
    pub fn text_of(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.as_str())
    }
}

fn local(name: &str) -> String {
    match name.rsplit_once(':') {
        Some((_, local)) => local.to_owned(),
        None => name.to_owned(),
    }
}

fn open(e: &quick_xml::events::BytesStart<'_>) -> Result<Element, String> {
    let mut element = Element {
        name: local(e.name().as_ref()),
        ..Element::default()
    };
    for attr in e.attributes() {
        let attr = attr.map_err(|e| e.to_string())?;
        let key = local(attr.key.as_ref());
        let value = attr
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|e| e.to_string())?
            .into_owned();
        match key.as_str() {
            // a prefixed `type` is xsi:type; a bare one is a reference's type
            "type" if attr.key.as_ref().contains(':') => {
                element.xsi_type = Some(local(&value));
            }
            "type" => element.ref_type = Some(value),
            _ => {}
        }
    }
    Ok(element)
}

/// Parses a document into its root element.
pub fn parse(text: &str) -> Result<Element, String> {
    let mut reader = Reader::from_str(text);
    let mut stack: Vec<Element> = vec![Element::default()];
    loop {
        match reader.read_event().map_err(|e| format!("XML: {e}"))? {
            Event::Start(e) => stack.push(open(&e)?),
            Event::Empty(e) => {
                let element = open(&e)?;
                stack.last_mut().expect("root").children.push(element);
            }
            Event::End(_) => {
                let done = stack.pop().expect("balanced");
                let Some(parent) = stack.last_mut() else {
                    return Err("XML: unbalanced end tag".into());
                };
                parent.children.push(done);
                if stack.len() == 1 {
                    break;
                }
            }
            Event::Text(t) => {
                stack.last_mut().expect("root").text.push_str(&t.xml10_content());
            }
            Event::CData(t) => {
                stack.last_mut().expect("root").text.push_str(&t.into_inner());
            }
            Event::GeneralRef(r) => {
                let c = if r.is_char_ref() {
                    r.resolve_char_ref().map_err(|e| format!("XML: {e}"))?
                } else {
                    match r.into_inner().as_ref() {
                        "lt" => Some('<'),
                        "gt" => Some('>'),
                        "amp" => Some('&'),
                        "quot" => Some('"'),
                        "apos" => Some('\''),
                        other => return Err(format!("XML: unknown entity &{other};")),
                    }
                };
                if let Some(c) = c {
                    stack.last_mut().expect("root").text.push(c);
                }
            }
            Event::Eof => return Err("XML: the document ends early".into()),
            _ => {}
        }
        if stack.is_empty() {
            return Err("XML: unbalanced end tag".into());
        }
    }
    let mut root = stack.pop().expect("root");
    root.children.pop().ok_or_else(|| "XML: no element".to_owned())
}

/// `text` escaped for an element's content or an attribute.
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    quick_xml::escape::escape(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_soap_answer() {
        let doc = parse(r#"<?xml version="1.0"?><soapenv:Envelope xmlns:soapenv="x" xmlns:xsi="y"><soapenv:Body><r><returnval type="VirtualMachine">vm-1</returnval><val xsi:type="ArrayOfString"><string>a &amp; b&#33;</string></val><e/></r></soapenv:Body></soapenv:Envelope>"#).unwrap();
        assert_eq!(doc.name, "Envelope");
        let r = doc.path(&["Body", "r"]).unwrap();
        let rv = r.child("returnval").unwrap();
        assert_eq!(
            (rv.text.as_str(), rv.ref_type.as_deref()),
            ("vm-1", Some("VirtualMachine"))
        );
        let val = r.child("val").unwrap();
        assert_eq!(val.xsi_type.as_deref(), Some("ArrayOfString"));
        assert_eq!(val.text_of("string"), Some("a & b!"));
        assert!(r.child("e").is_some());
    }

    #[test]
    fn bad_documents_are_errors() {
        for text in ["", "<a>", "<a></b>", "</a>", "<a>&bogus;</a>", "<a x=\"1></a>"] {
            assert!(parse(text).is_err(), "{text}");
        }
    }

    proptest::proptest! {
        #[test]
        fn fuzz_parse(text in "(<[a-z:]{1,4}( xsi:type=\"[a-z]\")?>|</[a-z:]{1,4}>|<[a-z]/>|[a-z &;#0-9]{0,4}){0,10}") {
            let _ = parse(&text);
        }
    }
}
