//! The geometry of a job's chart on the status page: lateness and duration of its last runs,
//! computed here as numbers and strings so the template only places them (no JavaScript, no
//! arithmetic in the template).

use serde::Serialize;

/// The chart's size in CSS pixels.
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 170.0;
/// Room for the y labels (left) and the x labels (below).
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 26.0;
/// A dot's radius: big enough to hover for its tooltip.
const DOT: f64 = 3.0;

/// One run on the chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Shown under the first and last dots, and in each dot's tooltip.
    pub label: String,
    /// Start minus the slot's instant, in ms (clamped at 0: a start a little before the slot on
    /// this replica's clock is on time).
    pub lateness_ms: f64,
    /// Start to end, in ms.
    pub duration_ms: f64,
}

/// A chart ready to place: every coordinate is in the SVG's user units.
#[derive(Debug, Clone, Serialize)]
pub struct Chart {
    /// The SVG's size, in CSS pixels (the page's layout leaves room for it).
    pub width: f64,
    pub height: f64,
    /// The plot area (axes at `x0` and `y1`).
    pub x0: f64,
    pub x1: f64,
    pub y0: f64,
    pub y1: f64,
    /// 0, half and the top of the y axis, labelled in ms or s.
    pub y_ticks: Vec<Tick>,
    /// The first and last runs' slot times, under their dots.
    pub x_ticks: Vec<Tick>,
    /// Lateness, then duration.
    pub series: Vec<Series>,
    /// How many runs are drawn, for the caption.
    pub runs: usize,
}

/// An axis label at `pos` (y for the y axis, x for the x axis).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tick {
    pub pos: f64,
    /// What the reader sees there: a time or a value with its unit.
    pub label: String,
}

/// One line of the chart: a polyline through dots with tooltips.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// The CSS class (its colour) and the legend's word.
    pub class: &'static str,
    /// `x,y x,y …` for `<polyline points>`.
    pub points: String,
    /// One per run, each with its own tooltip (`<title>`): the exact value of that run.
    pub dots: Vec<Dot>,
}

/// One run's dot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dot {
    pub x: f64,
    pub y: f64,
    pub r: f64,
    /// The run's slot and value, shown on hover.
    pub title: String,
}

/// The chart of `samples` (oldest first); `None` without any.
pub fn chart(samples: &[Sample]) -> Option<Chart> {
    if samples.is_empty() {
        return None;
    }
    let top = samples
        .iter()
        .map(|s| s.lateness_ms.max(s.duration_ms))
        .fold(0.0, f64::max);
    let max = nice_ceiling(top);
    let y_ticks = [0.0, max / 2.0, max]
        .into_iter()
        .map(|v| Tick {
            pos: y_at(v, max),
            label: format_ms(v),
        })
        .collect();
    let series = vec![
        series("lateness", samples, max, |s| s.lateness_ms),
        series("duration", samples, max, |s| s.duration_ms),
    ];
    Some(Chart {
        width: WIDTH,
        height: HEIGHT,
        x0: LEFT,
        x1: WIDTH - RIGHT,
        y0: TOP,
        y1: HEIGHT - BOTTOM,
        y_ticks,
        x_ticks: x_ticks(samples),
        series,
        runs: samples.len(),
    })
}

fn series(class: &'static str, samples: &[Sample], max: f64, value: fn(&Sample) -> f64) -> Series {
    let dots: Vec<Dot> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| Dot {
            x: x_at(i, samples.len()),
            y: y_at(value(s), max),
            r: DOT,
            title: format!("{}: {class} {}", s.label, format_ms(value(s))),
        })
        .collect();
    let points = dots
        .iter()
        .map(|d| format!("{},{}", d.x, d.y))
        .collect::<Vec<_>>()
        .join(" ");
    Series {
        class,
        points,
        dots,
    }
}

/// The first and last runs' labels (one label when there is one run).
fn x_ticks(samples: &[Sample]) -> Vec<Tick> {
    let n = samples.len();
    let mut ticks = vec![Tick {
        pos: x_at(0, n),
        label: samples[0].label.clone(),
    }];
    if n > 1 {
        ticks.push(Tick {
            pos: x_at(n - 1, n),
            label: samples[n - 1].label.clone(),
        });
    }
    ticks
}

/// The x of the `i`th of `n` runs, spread over the plot (a lone run in its middle).
fn x_at(i: usize, n: usize) -> f64 {
    let (x0, x1) = (LEFT + DOT * 2.0, WIDTH - RIGHT - DOT * 2.0);
    if n <= 1 {
        return round(x0.midpoint(x1));
    }
    round(x0 + (x1 - x0) * i as f64 / (n - 1) as f64)
}

/// The y of `value` on an axis from 0 (bottom) to `max` (top); values outside are clamped.
fn y_at(value: f64, max: f64) -> f64 {
    let (top, bottom) = (TOP, HEIGHT - BOTTOM);
    let share = (value / max).clamp(0.0, 1.0);
    round(bottom - (bottom - top) * share)
}

/// The smallest of 1, 2, 5 × 10ⁿ ms at or above `ms` (at least 10 ms): a y axis a reader
/// can read at a glance.
pub fn nice_ceiling(ms: f64) -> f64 {
    let ms = ms.max(10.0);
    let magnitude = 10f64.powf(ms.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|v| *v >= ms)
        .unwrap_or(10.0 * magnitude)
}

/// `250 ms`, `1.5 s`, `12 s`: milliseconds below 1 s, seconds above.
pub fn format_ms(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{} ms", ms.round())
    } else if ms < 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{} s", (ms / 1000.0).round())
    }
}

/// One decimal is finer than a pixel; shorter markup.
fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(lateness_ms: f64, duration_ms: f64) -> Sample {
        Sample {
            label: "17:00:00".into(),
            lateness_ms,
            duration_ms,
        }
    }

    #[test]
    fn the_axis_tops_at_a_round_value() {
        assert_eq!(nice_ceiling(0.0), 10.0);
        assert_eq!(nice_ceiling(10.0), 10.0);
        assert_eq!(nice_ceiling(11.0), 20.0);
        assert_eq!(nice_ceiling(430.0), 500.0);
        assert_eq!(nice_ceiling(501.0), 1000.0);
        assert_eq!(nice_ceiling(1900.0), 2000.0);
    }

    #[test]
    fn durations_read_in_ms_below_a_second() {
        assert_eq!(format_ms(0.0), "0 ms");
        assert_eq!(format_ms(250.4), "250 ms");
        assert_eq!(format_ms(1500.0), "1.5 s");
        assert_eq!(format_ms(12_400.0), "12 s");
    }

    #[test]
    fn zero_sits_on_the_x_axis_and_the_top_value_at_the_top() {
        let c = chart(&[sample(0.0, 100.0), sample(50.0, 25.0)]).unwrap();
        let [lateness, duration] = [&c.series[0], &c.series[1]];
        assert_eq!(lateness.dots[0].y, c.y1);
        assert_eq!(duration.dots[0].y, c.y0, "100 ms is the axis' top");
        assert_eq!(lateness.dots[1].y, c.y0.midpoint(c.y1));
        assert_eq!(c.y_ticks.last().unwrap().label, "100 ms");
    }

    #[test]
    fn runs_spread_from_the_first_to_the_last_x_inside_the_plot() {
        let c = chart(&[sample(1.0, 1.0), sample(2.0, 2.0), sample(3.0, 3.0)]).unwrap();
        let xs: Vec<f64> = c.series[0].dots.iter().map(|d| d.x).collect();
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        assert!(xs[0] > c.x0 && xs[2] < c.x1, "{xs:?}");
        assert_eq!(c.series[0].points.split(' ').count(), 3);
        assert_eq!(c.x_ticks.len(), 2);
    }

    #[test]
    fn one_run_sits_in_the_middle_and_none_draw_nothing() {
        let c = chart(&[sample(1.0, 1.0)]).unwrap();
        assert_eq!(c.series[0].dots[0].x, c.x0.midpoint(c.x1));
        assert!(chart(&[]).is_none());
    }

    #[test]
    fn a_negative_lateness_is_drawn_on_the_axis() {
        let c = chart(&[sample(-20.0, 5.0)]).unwrap();
        assert_eq!(c.series[0].dots[0].y, c.y1);
    }
}
