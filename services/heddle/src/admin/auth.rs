//! Bearer-token check for admin calls (`--server.admin-token-file`).

use std::path::Path;
use std::sync::Arc;

/// The token admin callers must present as `authorization: Bearer <token>`; `None` when admin calls are
/// open (the default: bind them to a private address with `--server.admin-grpc-listen-address` instead).
#[derive(Clone, Default)]
pub struct AdminToken(Option<Arc<str>>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str(if self.0.is_some() {
            "AdminToken(set)"
        } else {
            "AdminToken(none)"
        })
    }
}

impl AdminToken {
    /// Reads the token from `path` (surrounding whitespace trimmed); an empty path means no token.
    pub fn load(path: &Path) -> Result<Self, String> {
        if path.as_os_str().is_empty() {
            return Ok(Self(None));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read server.admin_token_file {}: {e}", path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("server.admin_token_file {} is empty", path.display()));
        }
        Ok(Self(Some(token.into())))
    }

    /// A token from memory (tests).
    #[cfg(test)]
    pub fn from_str(token: &str) -> Self {
        Self(Some(token.into()))
    }

    /// Whether a token is required.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Checks an `authorization` header value; `Ok` when no token is configured.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<(), &'static str> {
        let Some(expected) = &self.0 else {
            return Ok(());
        };
        let Some(value) = authorization else {
            return Err("admin call without credentials: send `authorization: Bearer <token>` \
                        (heddlectl --token-file)");
        };
        let presented = value.strip_prefix(b"Bearer ").unwrap_or(b"");
        if constant_time_eq(presented, expected.as_bytes()) {
            Ok(())
        } else {
            Err("admin token rejected: it does not match --server.admin-token-file")
        }
    }

    /// The tonic interceptor refusing unauthenticated calls with `Unauthenticated`.
    pub fn interceptor(&self) -> impl tonic::service::Interceptor + Clone + use<> {
        let token = self.clone();
        move |req: tonic::Request<()>| {
            let header = req.metadata().get("authorization").map(|v| v.as_bytes());
            match token.check(header) {
                Ok(()) => Ok(req),
                Err(msg) => Err(tonic::Status::unauthenticated(msg)),
            }
        }
    }
}

/// Compares without an early exit, so response time does not reveal how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_checks() {
        let none = AdminToken::default();
        assert!(none.check(None).is_ok(), "no token configured: open");
        let t = AdminToken::from_str("s3cret");
        let cases: &[(&str, Option<&[u8]>, bool)] = &[
            ("missing", None, false),
            ("right", Some(b"Bearer s3cret"), true),
            ("wrong", Some(b"Bearer s3cre7"), false),
            ("prefix", Some(b"Bearer s3cretX"), false),
            ("no scheme", Some(b"s3cret"), false),
            ("basic", Some(b"Basic s3cret"), false),
        ];
        for (name, header, ok) in cases {
            assert_eq!(t.check(*header).is_ok(), *ok, "case {name}");
        }
        assert_eq!(format!("{t:?}"), "AdminToken(set)", "debug output hides the secret");
    }

    #[test]
    fn load_from_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "abc\n").unwrap();
        assert!(AdminToken::load(&p).unwrap().check(Some(b"Bearer abc")).is_ok());
        std::fs::write(&p, "  \n").unwrap();
        assert!(AdminToken::load(&p).unwrap_err().contains("is empty"));
        assert!(!AdminToken::load(Path::new("")).unwrap().is_set());
        assert!(AdminToken::load(&dir.path().join("missing")).is_err());
    }
}
