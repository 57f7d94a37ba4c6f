//! Results: rows of figures against their baselines, and the statistics behind them.

use std::io::Write as _;
use std::time::Duration;

use crate::run::last_cpu;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    AtMost(f64),
    AtLeast(f64),
    None,
}

#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) backend: String,
    pub(crate) figure: String,
    pub(crate) candidate: String,
    pub(crate) baseline: String,
    pub(crate) ratio: Option<f64>,
    pub(crate) target: Target,
}

impl Row {
    pub(crate) fn verdict(&self) -> &'static str {
        match (self.target, self.ratio) {
            (Target::AtMost(limit), Some(ratio)) if ratio <= limit => "met",
            (Target::AtLeast(limit), Some(ratio)) if ratio >= limit => "met",
            (Target::None, _) => "-",
            _ => "MISSED",
        }
    }

    pub(crate) fn target_text(&self) -> String {
        match self.target {
            Target::AtMost(limit) => format!("≤ {limit}"),
            Target::AtLeast(limit) => format!("≥ {limit}"),
            Target::None => "-".to_owned(),
        }
    }
}

#[derive(Default)]
pub(crate) struct Report {
    pub(crate) rows: Vec<Row>,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        scenario: &str,
        backend: &str,
        figure: &str,
        candidate: String,
        baseline: String,
        ratio: Option<f64>,
        target: Target,
    ) {
        let row = Row {
            scenario: scenario.to_owned(),
            backend: backend.to_owned(),
            figure: figure.to_owned(),
            candidate,
            baseline,
            ratio,
            target,
        };
        println!(
            "  => {} {} {}: {} vs {} ratio {} target {} {}",
            row.scenario,
            row.backend,
            row.figure,
            row.candidate,
            row.baseline,
            row.ratio.map_or("-".to_owned(), |r| format!("{r:.3}")),
            row.target_text(),
            row.verdict()
        );
        self.rows.push(row);
    }

    pub(crate) fn print(&self) {
        println!(
            "\n| scenario | backend | figure | nodeport-guard | baseline | ratio | target | met |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for row in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                row.scenario,
                row.backend,
                row.figure,
                row.candidate,
                row.baseline,
                row.ratio.map_or("-".to_owned(), |r| format!("{r:.2}")),
                row.target_text(),
                row.verdict()
            );
        }
    }
}

pub(crate) fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

pub(crate) fn median_f(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// The value below which `p` of the values lie (nearest rank).
pub(crate) fn percentile(values: &[Duration], p: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Median of the per-pair ratios candidate/baseline: each pair ran back to back, so the ratio
/// cancels most of the drift other load on the machine causes.
pub(crate) fn pair_ratio(candidate: &[Duration], baseline: &[Duration]) -> f64 {
    let ratios: Vec<f64> = candidate
        .iter()
        .zip(baseline)
        .map(|(c, b)| c.as_secs_f64() / b.as_secs_f64().max(1e-9))
        .collect();
    median_f(&ratios)
}

/// Wall-clock times of repeated runs, and the CPU time their processes used.
#[derive(Default)]
pub(crate) struct Series {
    pub(crate) wall: Vec<Duration>,
    pub(crate) cpu: Vec<Duration>,
}

impl Series {
    pub(crate) fn push(&mut self, wall: Duration) {
        self.wall.push(wall);
        self.cpu.push(last_cpu());
    }

    /// "median wall (CPU median cpu)".
    pub(crate) fn text(&self) -> String {
        format!("{} (CPU {})", ms(median(&self.wall)), ms(median(&self.cpu)))
    }
}

/// Runs `a` and `b` `runs` times each, interleaved (A B B A A B …), and returns their times.
pub(crate) fn interleave(
    runs: usize,
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> (Series, Series) {
    let (mut ta, mut tb) = (Series::default(), Series::default());
    for run in 0..runs {
        if run % 2 == 0 {
            ta.push(a());
            tb.push(b());
        } else {
            tb.push(b());
            ta.push(a());
        }
        print!(".");
        let _ = std::io::stdout().flush();
    }
    println!();
    (ta, tb)
}
