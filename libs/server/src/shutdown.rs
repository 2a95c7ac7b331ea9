//! Turning SIGTERM / SIGINT into a cancellation.

use tokio_util::sync::CancellationToken;

/// Cancels `token` on the first SIGTERM or SIGINT (Ctrl-C). Run it as a task; it returns after cancelling,
/// or when the token is cancelled by someone else.
pub async fn shutdown_signal(token: CancellationToken) {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!(signal = "SIGINT", "shutting down"),
        _ = term => tracing::info!(signal = "SIGTERM", "shutting down"),
        _ = token.cancelled() => return,
    }
    token.cancel();
}
