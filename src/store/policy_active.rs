//! The policy set last activated on this database (`policy_active`, one
//! row): written with every activation, by any instance, at start-up and by
//! every applied reload, so a restart under `[lifecycle] prove =
//! "refuse-widening"` proves its policy files against the set that was
//! deciding before it (`crate::lifecycle::startup`).

use super::db::Value as SqlValue;
use super::{Conn, StoreError, WriteOp};

/// Notes that `instance` activated the set `hash` (`by`: `startup` or the
/// reload's trigger) at `at`, replacing the previous activation.
pub fn activated_op(hash: &str, instance: &str, by: &str, at: &str) -> WriteOp {
    WriteOp::Exec {
        sql: "INSERT INTO policy_active (id, hash, instance_id, activated_by, activated_at)
              VALUES (1, ?1, ?2, ?3, ?4)
              ON CONFLICT (id) DO UPDATE SET hash = excluded.hash,
                  instance_id = excluded.instance_id,
                  activated_by = excluded.activated_by,
                  activated_at = excluded.activated_at",
        params: vec![
            SqlValue::Text(hash.to_string()),
            SqlValue::Text(instance.to_string()),
            SqlValue::Text(by.to_string()),
            SqlValue::Text(at.to_string()),
        ],
    }
}

/// The hash of the set last activated on this database, if any was.
pub fn last(conn: &mut Conn) -> Result<Option<String>, StoreError> {
    conn.query_opt(
        "SELECT hash FROM policy_active WHERE id = 1",
        crate::params![],
        |r| r.get(0),
    )
}
