//! The load generator's error type.

/// Why a push or verify run could not run at all (as opposed to finding errors, which its report counts).
#[derive(Debug, thiserror::Error)]
pub enum LoadtestError {
    #[error("invalid flags: {0}")]
    Flags(String),
    #[error(transparent)]
    Testkit(#[from] heddle_testkit::TestkitError),
    #[error("background task failed: {0}")]
    Task(String),
    #[error("invalid scenario: {0}")]
    Scenario(String),
    #[error("target: {0}")]
    Target(String),
    #[error("output: {0}")]
    Output(String),
}
