//! Bearer-token check for admin calls (`--server.admin-token-file`), on the shared constant-time
//! [`BearerToken`].

use crate::access::{Api, AuthRefusals};
use heddle_model::error_id::ADMIN_UNAUTHENTICATED;
use heddle_proto::transport::{AUTHORIZATION_METADATA, BearerToken, CredentialsRefusal};
use std::path::Path;

/// The token admin callers must present as `authorization: Bearer <token>`; none when admin calls are open
/// (the default: bind them to a private address with `--server.admin-grpc-listen-address` instead).
#[derive(Debug, Clone, Default)]
pub struct AdminToken(BearerToken);

impl AdminToken {
    /// Reads the token from `path` (surrounding whitespace trimmed); an empty path means no token.
    pub fn load(path: &Path) -> Result<Self, String> {
        BearerToken::load(path, "server.admin_token_file").map(Self)
    }

    /// A token from memory (tests).
    #[cfg(test)]
    pub fn from_str(token: &str) -> Self {
        Self(BearerToken::parse(token).expect("test token"))
    }

    /// Whether a token is required.
    pub fn is_set(&self) -> bool {
        self.0.is_set()
    }

    /// Checks an `authorization` header value; `Ok` when no token is configured. The error carries the reason
    /// (for the refusal metric) and the message for the caller.
    pub fn check(&self, authorization: Option<&[u8]>) -> Result<(), (CredentialsRefusal, String)> {
        self.0.verify(authorization).map_err(|refusal| {
            let msg = match refusal {
                CredentialsRefusal::Missing => format!(
                    "{ADMIN_UNAUTHENTICATED}: admin call without credentials: send `authorization: Bearer <token>` \
                     with the token of --server.admin-token-file (heddlectl --token-file)"
                ),
                CredentialsRefusal::Wrong => format!(
                    "{ADMIN_UNAUTHENTICATED}: admin token rejected: it does not match --server.admin-token-file"
                ),
            };
            (refusal, msg)
        })
    }

    /// The tonic interceptor refusing unauthenticated calls with `Unauthenticated`, counted in `refusals`.
    pub fn interceptor(&self, refusals: AuthRefusals) -> impl tonic::service::Interceptor + Clone + use<> {
        let token = self.clone();
        move |req: tonic::Request<()>| {
            let header = req.metadata().get(AUTHORIZATION_METADATA).map(|v| v.as_bytes());
            match token.check(header) {
                Ok(()) => Ok(req),
                Err((refusal, msg)) => {
                    refusals.count(Api::AdminGrpc, refusal.reason());
                    Err(tonic::Status::unauthenticated(msg))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_checks() {
        let none = AdminToken::default();
        assert!(none.check(None).is_ok(), "no token configured: open");
        let t = AdminToken::from_str("s3cret");
        type Case = (&'static str, Option<&'static [u8]>, Option<CredentialsRefusal>);
        let cases: &[Case] = &[
            ("missing", None, Some(CredentialsRefusal::Missing)),
            ("right", Some(b"Bearer s3cret"), None),
            ("wrong", Some(b"Bearer s3cre7"), Some(CredentialsRefusal::Wrong)),
            ("prefix", Some(b"Bearer s3cretX"), Some(CredentialsRefusal::Wrong)),
            ("no scheme", Some(b"s3cret"), Some(CredentialsRefusal::Missing)),
            ("basic", Some(b"Basic s3cret"), Some(CredentialsRefusal::Missing)),
        ];
        for (name, header, want) in cases {
            let got = t.check(*header);
            assert_eq!(got.as_ref().err().map(|e| e.0), *want, "case {name}");
            if let Err((_, msg)) = got {
                assert!(msg.starts_with(ADMIN_UNAUTHENTICATED), "case {name}: {msg}");
                assert!(msg.contains("--server.admin-token-file"), "case {name}: {msg}");
            }
        }
        assert!(!format!("{t:?}").contains("s3cret"), "debug output hides the secret");
    }

    #[test]
    fn interceptor_refuses_and_counts() {
        use tonic::service::Interceptor as _;
        let refusals = AuthRefusals::default();
        let mut i = AdminToken::from_str("abc").interceptor(refusals.clone());
        let status = i.call(tonic::Request::new(())).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
        assert!(
            status.message().starts_with(ADMIN_UNAUTHENTICATED),
            "{}",
            status.message()
        );
        let mut ok = tonic::Request::new(());
        ok.metadata_mut().insert("authorization", "Bearer abc".parse().unwrap());
        assert!(i.call(ok).is_ok());
        assert_eq!(refusals.get(Api::AdminGrpc, "missing_token"), 1);
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
