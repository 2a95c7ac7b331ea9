//! Errors of the bucket crate.

use std::path::PathBuf;

/// What can go wrong talking to the bucket or reading the local block being shipped.
///
/// None of them is a client's fault: the ingester keeps the block and retries on the next ship interval.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// An object store call failed (after the retries it was allowed).
    #[error(
        "{backend} bucket: {operation} of {key} failed after {attempts} attempt(s): {source}{}",
        hint(source)
    )]
    Store {
        /// `filesystem`, `s3` or `memory`.
        backend: &'static str,
        /// The operation (`upload`, `get`, `get_range`, `attributes`, `iter`).
        operation: &'static str,
        /// The object key (or prefix, for listings).
        key: String,
        /// Calls made, the failing one included.
        attempts: u32,
        /// What the store said (boxed: `object_store::Error` is large and most results are `Ok`).
        #[source]
        source: Box<object_store::Error>,
    },
    /// A local file of a block could not be read or written.
    #[error("bucket: local i/o on {path}: {source}")]
    Local {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A block is not fit to upload or download (missing or invalid `meta.json`, wrong directory name).
    #[error("bucket: invalid block {what}: {reason}")]
    InvalidBlock {
        /// Block directory or object key.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// The bucket configuration cannot produce a client.
    #[error("bucket: invalid configuration: {0}")]
    Config(String),
}

fn hint(source: &object_store::Error) -> &'static str {
    let denied = matches!(
        source,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) || matches!(generic_status(source), Some(401 | 403));
    if denied {
        " (check blocks_storage.s3.access_key_id, secret_access_key and region)"
    } else {
        ""
    }
}

impl BucketError {
    /// Whether the same call may succeed later (the store was unreachable or overloaded, a local file was
    /// briefly unavailable). Wrong credentials, missing objects and invalid blocks are not retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            BucketError::Store { source, .. } => store_error_is_retryable(source),
            BucketError::Local { source, .. } => source.kind() != std::io::ErrorKind::NotFound,
            BucketError::InvalidBlock { .. } | BucketError::Config(_) => false,
        }
    }

    /// Whether the store said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, BucketError::Store { source, .. } if matches!(**source, object_store::Error::NotFound { .. }))
    }
}

/// Whether an `object_store` error may go away by itself. Transport failures and 5xx answers arrive as
/// `Generic`; a `Generic` carrying a 4xx answer (other than timeout and throttling) is as definite as the
/// precise variants object calls get.
pub(crate) fn store_error_is_retryable(e: &object_store::Error) -> bool {
    match e {
        object_store::Error::Generic { .. } => {
            !matches!(generic_status(e), Some(s) if (400..500).contains(&s) && s != 408 && s != 429)
        }
        object_store::Error::JoinError { .. } => true,
        _ => false,
    }
}

/// The HTTP status of a server answer wrapped in a `Generic` error. `object_store` maps statuses to precise
/// variants for object calls but not for listings, and has no typed accessor for them, so this reads the
/// status from the error text ("... non-2xx status code: 403 Forbidden ..."); the S3 integration test
/// (wrong credentials on a listing) notices if that text changes.
fn generic_status(e: &object_store::Error) -> Option<u16> {
    if !matches!(e, object_store::Error::Generic { .. }) {
        return None;
    }
    const MARK: &str = "status code: ";
    let text = e.to_string();
    let at = text.find(MARK)? + MARK.len();
    text.get(at..at + 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.to_owned().into(),
        }
    }

    #[test]
    fn retryable_by_kind_and_status() {
        let cases = [
            (
                "connection refused",
                generic("error sending request: connection refused"),
                true,
            ),
            (
                "5xx",
                generic("Server returned non-2xx status code: 503 Service Unavailable: slow down"),
                true,
            ),
            (
                "throttled",
                generic("Server returned non-2xx status code: 429 Too Many Requests: "),
                true,
            ),
            (
                "forbidden listing",
                generic("Server returned non-2xx status code: 403 Forbidden: <Error>"),
                false,
            ),
            (
                "no such bucket",
                generic("Server returned non-2xx status code: 404 Not Found: NoSuchBucket"),
                false,
            ),
            (
                "not found",
                object_store::Error::NotFound {
                    path: "k".into(),
                    source: "gone".into(),
                },
                false,
            ),
        ];
        for (name, source, want) in cases {
            let err = BucketError::Store {
                backend: "s3",
                operation: "iter",
                key: "team-a".into(),
                attempts: 1,
                source: Box::new(source),
            };
            assert_eq!(err.is_retryable(), want, "{name}: {err}");
            let hinted = err.to_string().contains("access_key_id");
            assert_eq!(hinted, name == "forbidden listing", "{name}: {err}");
        }
    }
}
