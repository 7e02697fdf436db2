//! The queues' charts, drawn here as SVG from the per-minute rollup (`flow::rollup`): per
//! queue, the last hour of runs started, succeeded and failed per minute; the jobs waiting,
//! held and running (with the queue's `max_running`, when it has one for the whole queue); and the wait from
//! submission to start, p50 and p99. Minutes the queue was paused are shaded. No script:
//! the page's refresh redraws them.

use maud::{html, Markup, PreEscaped};

use crate::flow::rollup::{Minute, MINUTES};

const WIDTH: f64 = 360.0;
const HEIGHT: f64 = 120.0;
/// Room on the left for the scale, at the bottom for the times.
const LEFT: f64 = 34.0;
const BOTTOM: f64 = 14.0;
const TOP: f64 = 6.0;

/// One line of a chart: a value per minute, `None` where nothing was measured.
pub struct Series {
    pub name: &'static str,
    pub class: &'static str,
    pub points: Vec<Option<f64>>,
}

/// The three charts of one queue.
pub fn queue(name: &str, minutes: &[Minute], max_running: Option<u32>) -> Markup {
    let paused: Vec<bool> = minutes.iter().map(|minute| minute.paused).collect();
    let each = |value: fn(&Minute) -> Option<f64>| minutes.iter().map(value).collect::<Vec<_>>();
    let runs = [
        Series { name: "started", class: "started", points: each(|m| Some(m.started as f64)) },
        Series { name: "succeeded", class: "succeeded", points: each(|m| Some(m.succeeded as f64)) },
        Series {
            name: "failed or cancelled",
            class: "failed",
            points: each(|m| Some((m.failed + m.cancelled) as f64)),
        },
    ];
    let load = [
        Series { name: "waiting", class: "waiting", points: each(|m| m.depth.map(|n| n as f64)) },
        Series { name: "held", class: "held", points: each(|m| m.held.map(|n| n as f64)) },
        Series { name: "running", class: "running", points: each(|m| m.running.map(|n| n as f64)) },
    ];
    let waits = [
        Series { name: "p50", class: "p50", points: each(|m| m.wait_p50_ms.map(|ms| ms / 1000.0)) },
        Series { name: "p99", class: "p99", points: each(|m| m.wait_p99_ms.map(|ms| ms / 1000.0)) },
    ];
    let started: i64 = minutes.iter().map(|minute| minute.started).sum();
    let ended: i64 = minutes.iter().map(|minute| minute.succeeded + minute.failed + minute.cancelled).sum();
    html! {
        div class="queue-charts" data-queue=(name) data-started=(started) data-ended=(ended)
            data-paused-minutes=(paused.iter().filter(|paused| **paused).count()) {
            h3 { (name) }
            (chart("Runs per minute", &runs, &paused, None, ""))
            (chart("Jobs waiting and running", &load, &paused, max_running.map(f64::from), ""))
            (chart("Wait to start", &waits, &paused, None, "s"))
        }
    }
}

/// A line chart of `series` over the last hour, paused minutes shaded, `limit` dashed.
pub fn chart(title: &str, series: &[Series], paused: &[bool], limit: Option<f64>, unit: &str) -> Markup {
    let highest =
        series.iter().flat_map(|line| line.points.iter().flatten()).fold(0.0f64, |top, value| top.max(*value));
    let top = nice(highest.max(limit.unwrap_or(0.0)).max(if unit.is_empty() { 1.0 } else { 0.001 }));
    let step = (WIDTH - LEFT) / (MINUTES - 1) as f64;
    let x = |at: usize| LEFT + at as f64 * step;
    let y = |value: f64| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - value / top);
    let mut svg = String::new();
    for (at, _) in paused.iter().enumerate().filter(|(_, paused)| **paused) {
        let left = (x(at) - step / 2.0).max(LEFT);
        svg.push_str(&format!(
            r#"<rect class="paused" x="{left:.1}" y="{TOP}" width="{step:.1}" height="{:.1}"><title>paused</title></rect>"#,
            HEIGHT - TOP - BOTTOM
        ));
    }
    svg.push_str(&format!(
        r#"<line class="axis" x1="{LEFT}" y1="{bottom:.1}" x2="{WIDTH}" y2="{bottom:.1}"/><text class="scale" x="{:.1}" y="{:.1}">{}{unit}</text><text class="scale" x="{:.1}" y="{bottom:.1}">0</text>"#,
        LEFT - 3.0,
        TOP + 8.0,
        label(top),
        LEFT - 3.0,
        bottom = HEIGHT - BOTTOM,
    ));
    for (at, text, anchor) in [(0, "-60m", "start"), (MINUTES / 2, "-30m", "middle"), (MINUTES - 1, "now", "end")] {
        svg.push_str(&format!(
            r#"<text class="time" text-anchor="{anchor}" x="{:.1}" y="{:.1}">{text}</text>"#,
            x(at),
            HEIGHT - 2.0
        ));
    }
    if let Some(limit) = limit {
        let at = y(limit);
        svg.push_str(&format!(
            r#"<line class="limit" x1="{LEFT}" y1="{at:.1}" x2="{WIDTH}" y2="{at:.1}"><title>max_running {}</title></line>"#,
            label(limit)
        ));
    }
    for line in series {
        // A gap where nothing was measured breaks the line.
        let mut runs: Vec<Vec<String>> = vec![Vec::new()];
        for (at, point) in line.points.iter().enumerate() {
            match point {
                Some(value) => {
                    runs.last_mut().unwrap_or(&mut Vec::new()).push(format!("{:.1},{:.1}", x(at), y(*value)))
                }
                None => runs.push(Vec::new()),
            }
        }
        for run in runs.iter().filter(|run| !run.is_empty()) {
            let points = run.join(" ");
            match run.len() {
                1 => {
                    let (cx, cy) = points.split_once(',').unwrap_or(("0", "0"));
                    svg.push_str(&format!(r#"<circle class="{}" cx="{cx}" cy="{cy}" r="1.5"/>"#, line.class));
                }
                _ => svg.push_str(&format!(r#"<polyline class="{}" points="{points}"/>"#, line.class)),
            }
        }
    }
    html! {
        figure class="chart" {
            figcaption {
                (title)
                @for line in series { " " span class={ "key " (line.class) } { (line.name) } }
                @if limit.is_some() { " " span class="key limit" { "limit" } }
            }
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(title) xmlns="http://www.w3.org/2000/svg" {
                (PreEscaped(svg))
            }
        }
    }
}

/// The scale's top: 1, 2 or 5 times a power of ten, at or above `value`.
fn nice(value: f64) -> f64 {
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|step| step * power).find(|top| *top >= value).unwrap_or(value)
}

fn label(value: f64) -> String {
    match value {
        v if v >= 1_000_000.0 => format!("{:.0}M", v / 1_000_000.0),
        v if v >= 1_000.0 => format!("{:.0}k", v / 1_000.0),
        v if v >= 1.0 => format!("{v:.0}"),
        v => format!("{v:.3}").trim_end_matches('0').trim_end_matches('.').to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_round_up() {
        assert_eq!(nice(7.0), 10.0);
        assert_eq!(nice(12.0), 20.0);
        assert_eq!(nice(0.03), 0.05);
        assert_eq!(label(2000.0), "2k");
        assert_eq!(label(0.05), "0.05");
    }

    #[test]
    fn gaps_break_lines_and_pauses_are_shaded() {
        let mut points = vec![Some(1.0); MINUTES];
        points[30] = None;
        let mut paused = vec![false; MINUTES];
        paused[10] = true;
        let line = Series { name: "x", class: "x", points };
        let drawn = chart("t", &[line], &paused, Some(2.0), "").into_string();
        assert_eq!(drawn.matches("<polyline").count(), 2, "{drawn}");
        assert_eq!(drawn.matches(r#"class="paused""#).count(), 1, "{drawn}");
        assert!(drawn.contains(r#"class="limit""#), "{drawn}");
    }
}
