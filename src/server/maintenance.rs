//! Background upkeep of the store while the server runs: the disk-space
//! guard's periodic look (and its metrics), the retention archive of
//! `[audit]` (off by default), and the bound on the A2A bridge's telemetry
//! rows (`[a2a_telemetry]`, always on: the rows grow with every bridged
//! call).
//!
//! The loops hold only a weak reference to the gateway, like the
//! heartbeat, and are aborted at shutdown.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::audit::archive::{self, ArchiveError, ArchiveRequest};
use crate::audit::checkpoint::CheckpointKey;
use crate::config::AuditConfig;
use crate::gateway::Gateway;

/// Looks at the free space every `database.free_space_check_ms` and
/// shows it in the metrics, until the gateway is dropped.
pub async fn space_loop(gw: Weak<Gateway>) {
    loop {
        let Some(gw) = gw.upgrade() else { return };
        let space = gw.store.space();
        space.refresh();
        gw.lifecycle.metrics.disk_space(space.status());
        let pause = Duration::from_millis(gw.config.database.free_space_check_ms.max(10));
        drop(gw);
        tokio::time::sleep(pause).await;
    }
}

/// Whether `[audit]` asks for periodic archives; an error names what is
/// missing.
pub fn retention_enabled(audit: &AuditConfig) -> Result<bool, String> {
    if audit.retention_days == 0 {
        return Ok(false);
    }
    let Some(dir) = &audit.archive_dir else {
        return Err("`audit.retention_days` is set but `audit.archive_dir` is not".into());
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create `audit.archive_dir` `{}`: {e}", dir.display()))?;
    Ok(true)
}

/// Archives the records older than `audit.retention_days` every
/// `audit.archive_interval_secs`, starting now, until the gateway is
/// dropped. Another instance holding the lease is not a failure.
pub async fn retention_loop(gw: Weak<Gateway>, key: Arc<CheckpointKey>) {
    loop {
        let Some(gw) = gw.upgrade() else { return };
        if gw.store.is_migrated() {
            retain(&gw, &key).await;
        }
        let pause = Duration::from_secs(gw.config.audit.archive_interval_secs.max(1));
        drop(gw);
        tokio::time::sleep(pause).await;
    }
}

/// One retention run.
async fn retain(gw: &Arc<Gateway>, key: &Arc<CheckpointKey>) {
    let audit = &gw.config.audit;
    let Some(dir) = &audit.archive_dir else {
        return;
    };
    let now = time::OffsetDateTime::now_utc();
    let days = i64::try_from(audit.retention_days).unwrap_or(i64::MAX / 86_400);
    let before = crate::ids::rfc3339(now - time::Duration::days(days));
    let stamp: String = crate::ids::rfc3339(now)
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let ext = match audit.archive_format {
        crate::audit::export::Format::Jsonl => "jsonl",
        crate::audit::export::Format::Ocsf => "ocsf.jsonl",
    };
    let req = ArchiveRequest {
        before,
        out: dir.join(format!("decisions-{stamp}.{ext}")),
        format: audit.archive_format,
        holder: gw.cluster.instance_id.clone(),
        key: Arc::clone(key),
        written: std::sync::Arc::default(),
    };
    let store = gw.store.clone();
    let outcome = tokio::task::spawn_blocking(move || archive::archive(&store, &req)).await;
    let metrics = &gw.lifecycle.metrics;
    match outcome {
        Ok(Ok(Some(report))) => {
            metrics.archive("archived");
            tracing::info!(records = report.anchor.records, last_seq = report.anchor.seq, file = %report.file.display(), "decision trail archived");
            if let Err(e) = gw.store.checkpoint().await {
                tracing::warn!(error = %e, "WAL checkpoint after the archive failed");
            }
        }
        Ok(Ok(None)) => metrics.archive("nothing"),
        Ok(Err(ArchiveError::Busy { holder, .. })) => {
            tracing::debug!(holder = %holder, "another instance is archiving the trail");
        }
        Ok(Err(e)) => {
            metrics.archive("failed");
            tracing::error!(error = %e, "retention archive refused");
        }
        Err(e) => {
            metrics.archive("failed");
            tracing::error!(error = %e, "retention archive task failed");
        }
    }
}

/// Bounds the A2A telemetry rows every `a2a_telemetry.prune_interval_secs`,
/// the first time one interval after start (a start writes nothing: the
/// prune is one job of six deletes, larger than a small write queue, and
/// nothing grew while the gateway was down), until the gateway is dropped.
/// Every instance prunes (the deletes are idempotent, so instances sharing
/// a database need no lease).
pub async fn telemetry_loop(gw: Weak<Gateway>) {
    loop {
        let Some(pause) = gw
            .upgrade()
            .map(|gw| Duration::from_secs(gw.config.a2a_telemetry.prune_interval_secs.max(1)))
        else {
            return;
        };
        tokio::time::sleep(pause).await;
        let Some(gw) = gw.upgrade() else { return };
        if gw.store.is_migrated() {
            prune_telemetry(&gw).await;
        }
    }
}

/// One prune: the rows older than `retention_hours`, then the oldest
/// beyond `max_rows` in each table.
pub async fn prune_telemetry(gw: &Gateway) {
    let config = &gw.config.a2a_telemetry;
    let hours = i64::try_from(config.retention_hours.max(1)).unwrap_or(i64::MAX);
    let before = time::OffsetDateTime::now_utc()
        .checked_sub(time::Duration::hours(hours.min(i64::MAX / 3600)))
        // A retention reaching before year -9999 deletes nothing by age.
        .map_or_else(String::new, crate::ids::rfc3339);
    let ops = crate::store::a2a_hooks::prune_ops(&before, config.max_rows);
    if let Err(e) = gw.store.writer().submit(ops).await {
        tracing::warn!(error = %e, "cannot prune the A2A telemetry rows");
    }
}
