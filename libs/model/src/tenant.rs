//! Tenant ids.

use std::fmt;
use std::sync::Arc;

/// HTTP header (and gRPC metadata key, lowercased) that carries the tenant id, as in Mimir and Cortex.
pub const TENANT_HEADER: &str = "X-Scope-OrgID";
/// Tenant used when multitenancy is disabled.
pub const DEFAULT_TENANT: &str = "anonymous";
const MAX_TENANT_ID_LEN: usize = 150;

/// Why a tenant id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantIdError {
    #[error("tenant id is empty")]
    Empty,
    #[error("tenant id is {len} bytes long; the limit is {MAX_TENANT_ID_LEN}")]
    TooLong { len: usize },
    #[error("tenant id {0:?} is not allowed")]
    Reserved(String),
    #[error("tenant id contains {ch:?}; allowed are letters, digits and !-_.*'()")]
    BadChar { ch: char },
}

/// A validated tenant id: 1 to 150 bytes of `[A-Za-z0-9!-_.*'()]`, not `.` or `..` (Mimir's rules, so a
/// tenant id is always a safe directory and object-store path component). Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(Arc<str>);

impl TenantId {
    pub fn new(id: &str) -> Result<Self, TenantIdError> {
        if id.is_empty() {
            return Err(TenantIdError::Empty);
        }
        if id.len() > MAX_TENANT_ID_LEN {
            return Err(TenantIdError::TooLong { len: id.len() });
        }
        if id == "." || id == ".." || id == "__mimir_cluster" {
            return Err(TenantIdError::Reserved(id.to_owned()));
        }
        if let Some(ch) = id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "!-_.*'()".contains(*c)))
        {
            return Err(TenantIdError::BadChar { ch });
        }
        Ok(Self(Arc::from(id)))
    }

    /// The tenant used when multitenancy is off.
    pub fn anonymous() -> Self {
        Self(Arc::from(DEFAULT_TENANT))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TenantId({:?})", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_id_rules() {
        let cases: &[(&str, bool)] = &[
            ("team-a", true),
            ("a.b_c(1)*'!", true),
            ("", false),
            (".", false),
            ("..", false),
            ("a/b", false),
            ("a b", false),
        ];
        for (id, ok) in cases {
            assert_eq!(TenantId::new(id).is_ok(), *ok, "case {id:?}");
        }
        assert!(TenantId::new(&"x".repeat(151)).is_err());
        assert!(TenantId::new(&"x".repeat(150)).is_ok());
    }
}
