//! The session chart: input tokens of every request, drawn as SVG on the server. One
//! `circle.point` per request (with its number and size in a `<title>`), the unmanaged
//! history as a second line, the window as a dashed line and one `line.compaction` marker per
//! compaction. Styling comes from the console's stylesheet and SVG presentation attributes,
//! so the strict Content-Security-Policy needs no inline style.

use std::fmt::Write;

pub use ctxkeeper_core::stats::thousands;

use crate::sessions::timeline::Timeline;

const WIDTH: f64 = 880.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// The chart of `timeline` as an SVG element (its text needs no further escaping: it holds
/// only numbers and fixed words).
pub fn svg(timeline: &Timeline) -> String {
    let steps = &timeline.steps;
    let mut out = String::with_capacity(256 + steps.len() * 160);
    let _ = write!(
        out,
        r#"<svg id="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="input tokens per request" data-points="{}">"#,
        steps.len()
    );
    if steps.is_empty() {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" class="empty">no requests recorded</text></svg>"#,
            WIDTH / 2.0 - 70.0,
            HEIGHT / 2.0
        );
        return out;
    }
    let max = steps
        .iter()
        .map(|s| s.tokens().max(s.unmanaged()).max(s.window()))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let n = steps.len();
    let x = |i: usize| {
        if n == 1 {
            LEFT + plot_w / 2.0
        } else {
            LEFT + plot_w * i as f64 / (n - 1) as f64
        }
    };
    let y = |tokens: u64| TOP + plot_h * (1.0 - tokens as f64 / max);
    // Axes and the scale.
    let _ = write!(
        out,
        r#"<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{b}"/><line class="axis" x1="{LEFT}" y1="{b}" x2="{r}" y2="{b}"/>"#,
        b = HEIGHT - BOTTOM,
        r = WIDTH - RIGHT
    );
    for fraction in [0.0, 0.5, 1.0] {
        let tokens = (max * fraction) as u64;
        let _ = write!(
            out,
            r#"<text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y(tokens) + 4.0,
            thousands(tokens)
        );
    }
    let first = timeline.first_step.max(1);
    let _ = write!(
        out,
        r#"<text class="tick" x="{LEFT}" y="{}">request {first}</text><text class="tick" x="{}" y="{}" text-anchor="end">request {}</text>"#,
        HEIGHT - 8.0,
        WIDTH - RIGHT,
        HEIGHT - 8.0,
        first + n as u64 - 1
    );
    // The window, where the newest request states one.
    if let Some(window) = steps.last().map(|s| s.window()).filter(|w| *w > 0) {
        let _ = write!(
            out,
            r#"<line class="window" x1="{LEFT}" y1="{y:.1}" x2="{r}" y2="{y:.1}" stroke-dasharray="6 4"><title>window {w}</title></line>"#,
            y = y(window),
            r = WIDTH - RIGHT,
            w = thousands(window)
        );
    }
    // Compaction markers at the request whose step ran them.
    for compaction in &timeline.compactions {
        let Some(index) = compaction
            .step
            .checked_sub(first)
            .map(|i| i as usize)
            .filter(|i| *i < n)
        else {
            continue;
        };
        let _ = write!(
            out,
            r#"<line class="compaction" data-step="{}" x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{b}"><title>compaction at request {}: {} → {} tokens</title></line>"#,
            compaction.step,
            compaction.step,
            thousands(compaction.tokens_before),
            thousands(compaction.tokens_after),
            x = x(index),
            b = HEIGHT - BOTTOM
        );
    }
    let line = |out: &mut String, class: &str, value: &dyn Fn(usize) -> u64| {
        let _ = write!(out, r#"<polyline class="{class}" fill="none" points=""#);
        for i in 0..n {
            let _ = write!(out, "{:.1},{:.1} ", x(i), y(value(i)));
        }
        out.push_str(r#""/>"#);
    };
    line(&mut out, "unmanaged", &|i| steps[i].unmanaged());
    line(&mut out, "managed", &|i| steps[i].tokens());
    for (i, step) in steps.iter().enumerate() {
        let number = first + i as u64;
        let _ = write!(
            out,
            r#"<circle class="point" r="2.5" cx="{:.1}" cy="{:.1}" data-step="{number}" data-tokens="{}"><title>request {number}: {} tokens</title></circle>"#,
            x(i),
            y(step.tokens()),
            step.tokens(),
            thousands(step.tokens())
        );
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::timeline::{CompactionRecord, StepPoint};

    #[test]
    fn one_point_per_request_and_a_marker_per_compaction() {
        let mut timeline = Timeline {
            first_step: 1,
            ..Timeline::default()
        };
        for i in 0..7u64 {
            timeline
                .steps
                .push(StepPoint(i as i64, 100 * (i + 1), 1000, 100 * (i + 1)));
        }
        timeline.compactions.push(CompactionRecord {
            step: 4,
            at_ms: 3,
            reason: "tokens".into(),
            strategy: String::new(),
            stages: vec![],
            tokens_before: 900,
            tokens_after: 300,
            messages_before: 9,
            messages_after: 3,
            archive_refs: vec![],
            summary_degraded: false,
        });
        let svg = svg(&timeline);
        assert_eq!(svg.matches("<circle class=\"point\"").count(), 7);
        assert_eq!(svg.matches("<line class=\"compaction\"").count(), 1);
        assert!(svg.contains("data-points=\"7\""));
        assert!(svg.contains("request 7: 700 tokens"));
    }
}
