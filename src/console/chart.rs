//! The overview's chart: allows and denies per minute over the last hour,
//! as stacked bars. This computes the geometry; `overview.html` draws it
//! as inline SVG, so the chart needs no script and reads without one.

use serde::Serialize;

use crate::store::trail_stats::Minute;

/// Drawing width and height of the plot area, in SVG units.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 160.0;

/// One minute's bar.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    pub x: f64,
    pub width: f64,
    pub allow_y: f64,
    pub allow_h: f64,
    pub deny_y: f64,
    pub deny_h: f64,
    /// `HH:MM allow N, deny M` (the bar's tooltip).
    pub title: String,
}

/// An axis label.
#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    pub x: f64,
    pub label: String,
}

/// The chart of one window.
#[derive(Debug, Clone, Serialize)]
pub struct Chart {
    pub width: f64,
    pub height: f64,
    pub max: i64,
    pub allow: i64,
    pub deny: i64,
    pub bars: Vec<Bar>,
    pub ticks: Vec<Tick>,
}

/// Bars for the `slots` minutes listed in `minutes` (`YYYY-MM-DDTHH:MM`),
/// oldest first; minutes without records are gaps.
pub fn per_minute(slots: &[String], minutes: &[Minute]) -> Chart {
    let max = minutes
        .iter()
        .map(|m| m.allow + m.deny)
        .max()
        .unwrap_or(0)
        .max(1);
    let slot_w = WIDTH / slots.len().max(1) as f64;
    let scale = |n: i64| n as f64 / max as f64 * HEIGHT;
    let mut bars = Vec::new();
    let mut ticks = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        let x = i as f64 * slot_w;
        let label = slot.get(11..16).unwrap_or(slot).to_string();
        if i % 10 == 0 {
            ticks.push(Tick {
                x,
                label: label.clone(),
            });
        }
        let Some(m) = minutes.iter().find(|m| &m.minute == slot) else {
            continue;
        };
        let (allow_h, deny_h) = (scale(m.allow), scale(m.deny));
        bars.push(Bar {
            x: round(x + 1.0),
            width: round((slot_w - 2.0).max(1.0)),
            allow_y: round(HEIGHT - allow_h),
            allow_h: round(allow_h),
            deny_y: round(HEIGHT - allow_h - deny_h),
            deny_h: round(deny_h),
            title: format!("{label} allow {}, deny {}", m.allow, m.deny),
        });
    }
    Chart {
        width: WIDTH,
        height: HEIGHT,
        max,
        allow: minutes.iter().map(|m| m.allow).sum(),
        deny: minutes.iter().map(|m| m.deny).sum(),
        bars,
        ticks,
    }
}

fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stack_and_scale_to_the_busiest_minute() {
        let slots: Vec<String> = (0..60).map(|m| format!("2026-01-01T10:{m:02}")).collect();
        let minutes = vec![
            Minute {
                minute: "2026-01-01T10:05".into(),
                allow: 3,
                deny: 1,
            },
            Minute {
                minute: "2026-01-01T10:59".into(),
                allow: 0,
                deny: 2,
            },
        ];
        let c = per_minute(&slots, &minutes);
        assert_eq!(
            (c.max, c.allow, c.deny, c.bars.len(), c.ticks.len()),
            (4, 3, 3, 2, 6)
        );
        assert_eq!(c.bars[0].allow_h + c.bars[0].deny_h, HEIGHT);
        assert_eq!(c.bars[1].deny_h, HEIGHT / 2.0);
        assert_eq!(c.bars[1].title, "10:59 allow 0, deny 2");
    }
}
