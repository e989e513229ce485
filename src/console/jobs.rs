//! Console replays run in the background, one [`Job`] each: bounded in
//! number running at once (`console.replay_jobs`), with progress (records
//! read of the window's records) and cancellation through
//! [`crate::replay::Control`]. The last [`KEPT`] jobs are kept for their
//! pages; older finished ones are forgotten. A job remembers the role
//! that started it: an auditor may cancel an auditor's replay, never an
//! admin's ([`Job::may_cancel`]); an admin may cancel any.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use super::auth::Role;
use super::error::ConsoleError;
use crate::replay::{Control, ReplayReport};

/// Jobs kept for their pages.
const KEPT: usize = 32;

/// Where a job stands.
#[derive(Debug, Clone)]
pub enum JobState {
    /// Still replaying.
    Running,
    /// Finished with a report.
    Done(Arc<ReplayReport>),
    /// Stopped by an error.
    Failed(String),
    /// Cancelled after reading this many records.
    Cancelled(u64),
}

/// What a job replays.
#[derive(Debug, Clone, Serialize)]
pub struct JobSpec {
    /// The candidate: `pasted text` or `directory NAME`.
    pub against: String,
    /// The candidate set's hash.
    pub candidate_hash: String,
    /// Window start (RFC 3339).
    pub since: String,
    /// Window end (RFC 3339).
    pub until: String,
    /// Org filter, if any.
    pub org: Option<String>,
    /// Records in the window (an upper bound: the chain's seq range).
    pub total: u64,
}

/// One replay.
pub struct Job {
    /// Random id (its page's address).
    pub id: String,
    /// When it started.
    pub started_at: String,
    /// What it replays.
    pub spec: JobSpec,
    /// Progress and cancellation.
    pub control: Arc<Control>,
    /// Who started it.
    pub started_by: Role,
    state: Mutex<JobState>,
}

impl Job {
    /// A running job, started by `started_by`.
    pub fn new(spec: JobSpec, started_by: Role) -> Result<Job, ConsoleError> {
        Ok(Job {
            id: crate::ids::random_hex(16).map_err(|_| ConsoleError::Render)?,
            started_at: crate::ids::now_rfc3339(),
            spec,
            control: Arc::new(Control::default()),
            started_by,
            state: Mutex::new(JobState::Running),
        })
    }

    fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its state now.
    pub fn state(&self) -> JobState {
        self.lock().clone()
    }

    /// Sets its final state.
    pub fn finish(&self, state: JobState) {
        *self.lock() = state;
    }

    /// Whether `role` may cancel it: an admin any job, an auditor only
    /// an auditor's.
    pub fn may_cancel(&self, role: Role) -> bool {
        role == Role::Admin || self.started_by == Role::Auditor
    }

    fn running(&self) -> bool {
        matches!(*self.lock(), JobState::Running)
    }
}

/// The console's jobs.
pub struct Jobs {
    max_running: usize,
    list: Mutex<VecDeque<Arc<Job>>>,
}

impl Jobs {
    /// At most `max_running` running at once.
    pub fn new(max_running: usize) -> Jobs {
        Jobs {
            max_running: max_running.max(1),
            list: Mutex::new(VecDeque::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Job>>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits `job`, or refuses it when the running ones fill the bound.
    pub fn admit(&self, job: Job) -> Result<Arc<Job>, ConsoleError> {
        let mut list = self.lock();
        let running = list.iter().filter(|j| j.running()).count();
        if running >= self.max_running {
            return Err(ConsoleError::TooMuch(format!(
                "{running} replay(s) already running (console.replay_jobs = {}): wait or cancel one",
                self.max_running
            )));
        }
        let job = Arc::new(job);
        list.push_front(Arc::clone(&job));
        while list.len() > KEPT {
            match list.iter().rposition(|j| !j.running()) {
                Some(i) => {
                    list.remove(i);
                }
                None => break,
            }
        }
        Ok(job)
    }

    /// The job `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.lock().iter().find(|j| j.id == id).cloned()
    }

    /// The kept jobs, newest first.
    pub fn recent(&self) -> Vec<Arc<Job>> {
        self.lock().iter().cloned().collect()
    }
}
