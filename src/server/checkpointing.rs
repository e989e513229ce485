//! The trail's signed checkpoints while the server runs
//! ([`crate::audit::checkpoint`]): one every `checkpoints.interval_secs`
//! when the chain head moved, and one on a clean stop, after the last
//! records are flushed. The loop holds only a weak reference to the
//! gateway and is aborted at shutdown.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::audit::checkpoint::{self, CheckpointError, CheckpointKey, Kind};
use crate::gateway::Gateway;

/// Signs the head every `checkpoints.interval_secs` (when it moved), until
/// the gateway is dropped.
pub async fn checkpoint_loop(gw: Weak<Gateway>, key: Arc<CheckpointKey>) {
    loop {
        let Some(secs) = gw.upgrade().map(|g| g.config.checkpoints.interval_secs) else {
            return;
        };
        tokio::time::sleep(Duration::from_secs(secs.max(1))).await;
        let Some(gw) = gw.upgrade() else { return };
        if gw.store.is_migrated() {
            sign(&gw, &key, Kind::Interval).await;
        }
    }
}

/// Signs and stores the head now if it moved; a failure is logged (a
/// chain that no longer extends the newest checkpoint as an error: the
/// trail was tampered with).
pub async fn sign(gw: &Gateway, key: &Arc<CheckpointKey>, kind: Kind) {
    let key = Arc::clone(key);
    let signed = gw
        .store
        .read(move |c| Ok(checkpoint::sign_head(c, &key, kind)))
        .await;
    match signed {
        Ok(Ok(Some(row))) => {
            tracing::debug!(seq = row.seq, kind = %row.kind, "decision trail checkpoint signed");
        }
        Ok(Ok(None)) => {}
        Ok(Err(e @ CheckpointError::Diverged(_))) => {
            tracing::error!(error = %e, "the decision trail does not extend its newest signed checkpoint; run `cedargate audit verify --key`");
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot sign a decision trail checkpoint"),
        Err(e) => tracing::warn!(error = %e, "cannot sign a decision trail checkpoint"),
    }
}
