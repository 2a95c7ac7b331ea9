//! Closed segments are fsynced and closed off the append path, promptly (Prometheus does the same when it cuts
//! a segment): a segment left open until the next [`crate::Wal::sync`] kept its file descriptor, and after
//! truncation deleted the file, its disk space, for as long as the process ran.
//!
//! One thread serves every WAL of the process (a thread per tenant would grow with the tenants). Each writer
//! keeps a [`Pending`] count of its segments still queued, so [`crate::Wal::sync`] can wait for them and report
//! a failed fsync.

use crate::file::DurableFile;
use std::path::PathBuf;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// One writer's segments handed to the closer and not yet closed, and the first fsync that failed.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    state: Mutex<PendingState>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct PendingState {
    queued: usize,
    failed: Option<(PathBuf, std::io::Error)>,
}

impl Pending {
    /// Waits until every segment handed over has been fsynced and closed; returns the first fsync failure
    /// since the last call, if any.
    pub(crate) fn wait(&self) -> Option<(PathBuf, std::io::Error)> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while state.queued > 0 {
            state = self.done.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.failed.take()
    }

    /// Segments handed over and not closed yet.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).queued
    }

    fn finished(&self, path: PathBuf, result: std::io::Result<()>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.queued -= 1;
        if let Err(e) = result {
            tracing::error!(segment = %path.display(), error = %e, "fsync of a closed wal segment failed");
            state.failed.get_or_insert((path, e));
        }
        self.done.notify_all();
    }
}

struct Job {
    path: PathBuf,
    file: Box<dyn DurableFile>,
    pending: Arc<Pending>,
}

/// Queues `file` (the closed segment at `path`) to be fsynced and closed by the closer thread.
pub(crate) fn close_later(path: PathBuf, file: Box<dyn DurableFile>, pending: &Arc<Pending>) {
    pending.state.lock().unwrap_or_else(|p| p.into_inner()).queued += 1;
    let job = Job {
        path,
        file,
        pending: Arc::clone(pending),
    };
    if let Err(returned) = closer().send(job) {
        // The closer thread is gone (it never exits while the process runs; a panic in an fsync could end
        // it): close here rather than leak the file.
        let Job {
            path,
            mut file,
            pending,
        } = returned.0;
        let result = file.sync();
        drop(file);
        pending.finished(path, result);
    }
}

/// The process-wide closer thread's queue, started on first use.
fn closer() -> &'static Sender<Job> {
    static CLOSER: OnceLock<Sender<Job>> = OnceLock::new();
    CLOSER.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let spawned = std::thread::Builder::new().name("wal-closer".into()).spawn(move || {
            for Job {
                path,
                mut file,
                pending,
            } in rx
            {
                let result = file.sync();
                drop(file);
                pending.finished(path, result);
            }
        });
        if let Err(e) = spawned {
            // Without the thread the receiver is dropped, so every send fails and closes in the caller.
            tracing::error!(error = %e, "cannot start the wal closer thread; closing segments inline");
        }
        tx
    })
}
