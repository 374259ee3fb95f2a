//! Credentials from CPI's Secret layouts (reference §7.3, `credentialmanager.go`), read from a
//! mounted Secret: the files of `secrets-directory`, each named like a Secret key.
//!
//! Keys: `<server>.username` and `<server>.password` (one trailing newline dropped), or the
//! IPv6-safe form `server_<id>`, `username_<id>`, `password_<id>` (values as they are). A
//! session-manager URL (`<server>.vc-session-manager-url`, vSphere 8.0U3 shared sessions) is
//! recognised and refused by name: this provider logs in itself.
//!
//! The gateway reads no Kubernetes object: a `secret-name`/`secret-namespace` Secret reaches it
//! mounted as `secrets-directory` (the chart mounts it at CPI's default `/etc/cloud/secrets`).

use std::{collections::BTreeMap, path::Path};

use crate::config::Secret;

/// One vCenter's login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// User name.
    pub user: String,
    /// Password.
    pub password: Secret,
}

/// Why a Secret cannot be used; CPI's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// A key of neither layout.
    #[error("Unknown secret key {0:?}")]
    UnknownKey(String),
    /// A username without its password.
    #[error("Password is missing for server {0:?}")]
    PasswordMissing(String),
    /// A password without its username.
    #[error("Username is missing for server {0:?}")]
    UsernameMissing(String),
    /// `username_<id>`/`password_<id>` without `server_<id>`.
    #[error("Credentials did not have all required values (server_{0})")]
    Incomplete(String),
    /// A session-manager URL: shared sessions are not implemented here.
    #[error(
        "{0:?}: vCenter shared sessions (vc-session-manager-url) are not supported by this provider; give a username and password"
    )]
    SessionManager(String),
    /// No data at all.
    #[error("the Secret holds no credentials")]
    Empty,
    /// The directory could not be read.
    #[error("secrets directory {path}: {message}")]
    Read {
        /// The directory.
        path: String,
        /// The reason.
        message: String,
    },
}

/// The credentials in a Secret's data (key → value), by vCenter server.
pub fn parse(data: &BTreeMap<String, String>) -> Result<BTreeMap<String, Credential>, SecretError> {
    if data.is_empty() {
        return Err(SecretError::Empty);
    }
    let mut users: BTreeMap<String, String> = BTreeMap::new();
    let mut passwords: BTreeMap<String, String> = BTreeMap::new();
    let mut alt: BTreeMap<String, [Option<String>; 3]> = BTreeMap::new();
    for (key, value) in data {
        let trimmed = || value.strip_suffix('\n').unwrap_or(value).to_owned();
        if let Some(server) = key.strip_suffix(".username") {
            users.insert(server.to_owned(), trimmed());
        } else if let Some(server) = key.strip_suffix(".password") {
            passwords.insert(server.to_owned(), trimmed());
        } else if key.ends_with(".vc-session-manager-url") || key.ends_with(".vc-session-manager-token") {
            return Err(SecretError::SessionManager(key.clone()));
        } else if let Some((kind, id)) = key.split_once('_') {
            let slot = match kind {
                "server" => 0,
                "username" => 1,
                "password" => 2,
                _ => return Err(SecretError::UnknownKey(key.clone())),
            };
            alt.entry(id.to_owned()).or_default()[slot] = Some(value.clone());
        } else {
            return Err(SecretError::UnknownKey(key.clone()));
        }
    }
    let mut out = BTreeMap::new();
    for (server, user) in &users {
        let password = passwords
            .get(server)
            .ok_or_else(|| SecretError::PasswordMissing(server.clone()))?;
        out.insert(
            server.clone(),
            Credential {
                user: user.clone(),
                password: Secret(password.clone()),
            },
        );
    }
    if let Some(server) = passwords.keys().find(|s| !users.contains_key(*s)) {
        return Err(SecretError::UsernameMissing(server.clone()));
    }
    for (id, [server, user, password]) in alt {
        match (server, user, password) {
            (Some(server), Some(user), Some(password)) => {
                out.insert(
                    server,
                    Credential {
                        user,
                        password: Secret(password),
                    },
                );
            }
            _ => return Err(SecretError::Incomplete(id)),
        }
    }
    Ok(out)
}

/// The Secret mounted at `dir`: every regular file whose name does not start with `.` (a
/// mounted Secret's `..data` links are skipped).
pub fn read_dir(dir: &Path) -> Result<BTreeMap<String, Credential>, SecretError> {
    let err = |e: std::io::Error| SecretError::Read {
        path: dir.display().to_string(),
        message: e.to_string(),
    };
    let mut data = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !entry.path().is_file() {
            continue;
        }
        let value = std::fs::read_to_string(entry.path()).map_err(err)?;
        data.insert(name, value);
    }
    parse(&data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn cred(user: &str, password: &str) -> Credential {
        Credential {
            user: user.into(),
            password: Secret(password.into()),
        }
    }

    /// CPI's TestParseSecretConfig, in substance.
    #[test]
    fn cpi_secret_layouts() {
        let got = parse(&data(&[
            ("10.0.0.1.username", "user\n"),
            ("10.0.0.1.password", "pass\n"),
        ]))
        .unwrap();
        assert_eq!(
            got["10.0.0.1"],
            cred("user", "pass"),
            "one trailing newline dropped"
        );
        let got = parse(&data(&[
            ("server_a", "fd00::1"),
            ("username_a", "u\n"),
            ("password_a", "p"),
            ("vc2.username", "u2"),
            ("vc2.password", "p2"),
        ]))
        .unwrap();
        assert_eq!(
            got["fd00::1"],
            cred("u\n", "p"),
            "alternative values are not trimmed"
        );
        assert_eq!(got["vc2"], cred("u2", "p2"));
        assert_eq!(
            parse(&data(&[("vc.usernam", "u")])),
            Err(SecretError::UnknownKey("vc.usernam".into()))
        );
        assert_eq!(
            parse(&data(&[("vc.username", "u")])),
            Err(SecretError::PasswordMissing("vc".into()))
        );
        assert_eq!(
            parse(&data(&[("vc.password", "p")])),
            Err(SecretError::UsernameMissing("vc".into()))
        );
        assert_eq!(
            parse(&data(&[("username_1", "u"), ("password_1", "p")])),
            Err(SecretError::Incomplete("1".into()))
        );
        assert_eq!(
            parse(&data(&[("serverx", "u")])),
            Err(SecretError::UnknownKey("serverx".into()))
        );
        assert!(matches!(
            parse(&data(&[("vc.vc-session-manager-url", "https://x")])),
            Err(SecretError::SessionManager(_))
        ));
        assert_eq!(parse(&data(&[])), Err(SecretError::Empty));
    }

    #[test]
    fn a_mounted_secret_is_read_from_its_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("vc.username"), "u\n").unwrap();
        std::fs::write(dir.path().join("vc.password"), "p\n").unwrap();
        std::fs::create_dir(dir.path().join("..2026_11_27")).unwrap();
        std::fs::write(dir.path().join("..data"), "").unwrap();
        assert_eq!(read_dir(dir.path()).unwrap()["vc"], cred("u", "p"));
        assert!(matches!(
            read_dir(&dir.path().join("absent")),
            Err(SecretError::Read { .. })
        ));
    }
}
