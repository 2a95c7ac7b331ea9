//! Shared-secret credentials: a bearer token read from a file, sent as `authorization: Bearer <token>` and
//! checked in constant time. The one home of that check, used for the cluster token that guards the ingester
//! API ([`GrpcIngesterClient::with_credentials`](super::GrpcIngesterClient::with_credentials) sends it) and for
//! the admin token of the operator API.

use std::path::Path;
use std::sync::Arc;
use tonic::metadata::{Ascii, MetadataValue};

/// gRPC metadata key (and HTTP header) carrying the credentials.
pub const AUTHORIZATION_METADATA: &str = "authorization";

/// Why presented credentials were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialsRefusal {
    /// No `authorization` value, or one that is not `Bearer <token>`.
    Missing,
    /// A bearer token that is not the configured one.
    Wrong,
}

impl CredentialsRefusal {
    /// The `reason` label value of the refusal metrics.
    pub fn reason(self) -> &'static str {
        match self {
            CredentialsRefusal::Missing => "missing_token",
            CredentialsRefusal::Wrong => "wrong_token",
        }
    }
}

/// A secret bearer token, or none (calls are then not checked). The secret never appears in `Debug` output.
#[derive(Clone, Default)]
pub struct BearerToken(Option<Arc<str>>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "BearerToken(set)"
        } else {
            "BearerToken(none)"
        })
    }
}

impl BearerToken {
    /// Reads the token from `path`, surrounding whitespace trimmed; an empty path means no token. `key` names
    /// the setting in error messages (e.g. `server.cluster_token_file`). The token must be non-empty visible
    /// ASCII without spaces, so it travels unchanged as an HTTP header and gRPC metadata.
    pub fn load(path: &Path, key: &str) -> Result<Self, String> {
        if path.as_os_str().is_empty() {
            return Ok(Self(None));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {key} {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|why| format!("{key} {}: {why}", path.display()))
    }

    /// A token from its text (surrounding whitespace trimmed), with the checks of [`Self::load`].
    pub fn parse(text: &str) -> Result<Self, String> {
        let token = text.trim();
        if token.is_empty() {
            return Err("is empty".into());
        }
        if let Some(c) = token.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(format!(
                "the token holds {c:?}: only visible ASCII without spaces can be sent as a bearer token"
            ));
        }
        Ok(Self(Some(token.into())))
    }

    /// Whether a token is configured.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Checks an `authorization` value (`Bearer <token>`); `Ok` when no token is configured.
    pub fn verify(&self, authorization: Option<&[u8]>) -> Result<(), CredentialsRefusal> {
        let Some(expected) = &self.0 else {
            return Ok(());
        };
        let Some(presented) = authorization.and_then(|v| v.strip_prefix(b"Bearer ")) else {
            return Err(CredentialsRefusal::Missing);
        };
        if constant_time_eq(presented, expected.as_bytes()) {
            Ok(())
        } else {
            Err(CredentialsRefusal::Wrong)
        }
    }

    /// The `authorization` metadata value to send (`Bearer <token>`, marked sensitive so it is never logged);
    /// `None` without a token.
    pub fn metadata_value(&self) -> Option<MetadataValue<Ascii>> {
        let token = self.0.as_ref()?;
        // `parse` admitted visible ASCII only, which is always a valid metadata value.
        let mut value = MetadataValue::try_from(format!("Bearer {token}")).ok()?;
        value.set_sensitive(true);
        Some(value)
    }
}

/// Compares without an early exit on the first differing byte, so the response time does not reveal how much
/// of a guess was right. Only the length (not secret in practice) can end it early.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_cases() {
        assert_eq!(BearerToken::default().verify(None), Ok(()), "no token configured: open");
        let t = BearerToken::parse("s3cret\n").unwrap();
        type Case = (&'static str, Option<&'static [u8]>, Result<(), CredentialsRefusal>);
        let cases: &[Case] = &[
            ("missing", None, Err(CredentialsRefusal::Missing)),
            ("right", Some(b"Bearer s3cret"), Ok(())),
            ("wrong", Some(b"Bearer s3cre7"), Err(CredentialsRefusal::Wrong)),
            ("longer", Some(b"Bearer s3cretX"), Err(CredentialsRefusal::Wrong)),
            ("empty bearer", Some(b"Bearer "), Err(CredentialsRefusal::Wrong)),
            ("no scheme", Some(b"s3cret"), Err(CredentialsRefusal::Missing)),
            ("basic", Some(b"Basic s3cret"), Err(CredentialsRefusal::Missing)),
        ];
        for (name, header, want) in cases {
            assert_eq!(t.verify(*header), *want, "case {name}");
        }
        assert_eq!(format!("{t:?}"), "BearerToken(set)", "debug output hides the secret");
    }

    #[test]
    fn constant_time_eq_cases() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"xbc", b"abc"));
    }

    #[test]
    fn parse_refuses_what_cannot_be_sent() {
        assert_eq!(BearerToken::parse("  \n").unwrap_err(), "is empty");
        assert!(BearerToken::parse("two words").unwrap_err().contains("' '"));
        assert!(BearerToken::parse("caf\u{e9}").unwrap_err().contains("visible ASCII"));
    }

    #[test]
    fn metadata_value_round_trips_through_verify() {
        let t = BearerToken::parse("tok-1").unwrap();
        let v = t.metadata_value().unwrap();
        assert!(v.is_sensitive());
        assert_eq!(t.verify(Some(v.as_bytes())), Ok(()));
        assert!(BearerToken::default().metadata_value().is_none());
    }

    #[test]
    fn load_from_file() {
        let dir = std::env::temp_dir().join(format!("heddle-bearer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("token");
        std::fs::write(&p, "abc\n").unwrap();
        let key = "server.cluster_token_file";
        assert_eq!(BearerToken::load(&p, key).unwrap().verify(Some(b"Bearer abc")), Ok(()));
        std::fs::write(&p, "  \n").unwrap();
        let err = BearerToken::load(&p, key).unwrap_err();
        assert!(err.starts_with(key) && err.ends_with("is empty"), "{err}");
        assert!(!BearerToken::load(Path::new(""), key).unwrap().is_set());
        let missing = BearerToken::load(&dir.join("missing"), key).unwrap_err();
        assert!(
            missing.starts_with("cannot read server.cluster_token_file"),
            "{missing}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
