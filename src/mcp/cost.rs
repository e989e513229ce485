//! What a request costs against the rate limits (`crate::rate_limits`):
//! the work it asks for, known before any of it is done. Each element of
//! the body costs one, except a `tools/list`, which costs the `view_tool`
//! decisions it will make (one per tool, or per equivalence class of a
//! peer's tools; at least one). A request without a body (`DELETE`) costs
//! one.

use super::jsonrpc::Message;
use super::tool_classes::Classes;
use crate::gateway::{Gateway, SessionView};
use crate::policy::PolicyBundle;

/// The tokens `messages` spend in `view`'s session.
pub fn of(gw: &Gateway, bundle: &PolicyBundle, view: &SessionView, messages: &[Message]) -> u32 {
    let mut list_cost: Option<u64> = None;
    let mut total: u64 = 0;
    for message in messages {
        total += match message {
            Message::Request { method, .. } if method == "tools/list" => *list_cost
                .get_or_insert_with(|| {
                    let decisions = Classes::of(gw, bundle, view).decisions(view);
                    u64::try_from(decisions).unwrap_or(u64::MAX).max(1)
                }),
            _ => 1,
        };
    }
    u32::try_from(total.max(1)).unwrap_or(u32::MAX)
}
