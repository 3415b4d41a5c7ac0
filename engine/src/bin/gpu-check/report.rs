//! The parity table: one row per check (op, shape, max relative error, tolerance, pass/fail) and a
//! summary line.
//!
//! The relative error of a check is `max |gpu - cpu| / max |cpu|` over the compared elements, so an
//! element near zero does not blow it up; a NaN anywhere in the GPU output (the poison left behind
//! by an element the kernel never wrote) makes it infinite.

/// Collected results.
#[derive(Default)]
pub struct Report {
    passed: usize,
    failed: Vec<String>,
}

/// `max |a - b| / max |b|`; infinite when `a` holds a NaN or the lengths differ.
pub fn rel_err(gpu: &[f32], cpu: &[f32]) -> f64 {
    if gpu.len() != cpu.len() || gpu.iter().any(|v| v.is_nan()) {
        return f64::INFINITY;
    }
    let scale = cpu.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
    let diff = gpu
        .iter()
        .zip(cpu)
        .fold(0f64, |m, (g, c)| m.max((*g as f64 - *c as f64).abs()));
    if scale == 0.0 { diff } else { diff / scale }
}

impl Report {
    /// Prints the table header.
    pub fn header(&self) {
        println!(
            "{:<34} {:<34} {:>11} {:>9}  result",
            "op", "shape", "max rel err", "tol"
        );
    }

    /// Compares `gpu` with `cpu` and prints a row.
    pub fn check(&mut self, op: &str, shape: &str, gpu: &[f32], cpu: &[f32], tol: f64) {
        self.row(op, shape, rel_err(gpu, cpu), tol);
    }

    /// Prints a row for an error computed elsewhere.
    pub fn row(&mut self, op: &str, shape: &str, err: f64, tol: f64) {
        let ok = err <= tol;
        let verdict = if ok { "pass" } else { "FAIL" };
        println!("{op:<34} {shape:<34} {err:>11.2e} {tol:>9.0e}  {verdict}");
        self.record(op, shape, ok);
    }

    /// Prints a row whose result is a sentence rather than an error figure.
    pub fn note(&mut self, op: &str, shape: &str, what: &str, ok: bool) {
        let verdict = if ok { "pass" } else { "FAIL" };
        println!("{op:<34} {shape:<34} {what:>21}  {verdict}");
        self.record(op, shape, ok);
    }

    fn record(&mut self, op: &str, shape: &str, ok: bool) {
        match ok {
            true => self.passed += 1,
            false => self.failed.push(format!("{op} {shape}")),
        }
    }

    /// Prints the summary line; true when every check passed.
    pub fn summary(&self) -> bool {
        let total = self.passed + self.failed.len();
        match self.failed.is_empty() {
            true => println!("summary: {total}/{total} checks passed"),
            false => println!(
                "summary: {}/{total} checks passed; failed: {}",
                self.passed,
                self.failed.join(", ")
            ),
        }
        self.failed.is_empty()
    }
}
