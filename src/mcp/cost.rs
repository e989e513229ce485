//! What a request costs against the rate limits (`crate::rate_limits`):
//! the work each element of its body asks for, charged element by element
//! just before the element is answered (the first in the prelude,
//! `call::spend`; each later one by `dispatch::answer`). A batch therefore
//! spends what its elements would alone, and a bucket's burst holds
//! whatever the batch limit: once an element is refused, it and the rest of
//! the batch answer -32029 without running.
//!
//! An element costs one, except a `tools/list`, which costs the
//! `view_tool` decisions it will make (one per tool, or per equivalence
//! class of a peer's tools; at least one), known before any of them is
//! made. A request without a body (`DELETE`) costs one. The listings of
//! the org's upstream servers (`resources/list`,
//! `resources/templates/list`, `prompts/list`) cost one more per server
//! they ask, charged before the requests go out, and one per entry they
//! decide, charged before the decisions (`entries::list`): their entries
//! are not known until the servers answer.

use super::jsonrpc::Message;
use super::tool_classes::Classes;
use crate::gateway::{Gateway, SessionView};
use crate::policy::PolicyBundle;

/// The tokens one element of a body spends in `view`'s session.
pub fn of(gw: &Gateway, bundle: &PolicyBundle, view: &SessionView, message: &Message) -> u32 {
    match message {
        Message::Request { method, .. } if method == "tools/list" => {
            let decisions = Classes::of(gw, bundle, view).decisions(view);
            u32::try_from(decisions).unwrap_or(u32::MAX).max(1)
        }
        _ => 1,
    }
}

/// The tokens the prelude spends: the first element's (one without any).
pub fn first(gw: &Gateway, bundle: &PolicyBundle, view: &SessionView, messages: &[Message]) -> u32 {
    messages.first().map_or(1, |m| of(gw, bundle, view, m))
}

/// A count of work items as tokens.
pub fn tokens(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
