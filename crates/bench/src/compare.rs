//! Do two runs' latencies differ? The dissertation's procedure (its R script used nortest,
//! moments and `wilcox.test`), on per-request durations:
//! 1. normality of each sample: Lilliefors (Kolmogorov–Smirnov with the sample's mean and
//!    standard deviation; nortest's p-value: Dallal–Wilkinson below 0.1, its polynomial above),
//!    or Shapiro–Wilk (Royston's AS R94, as R and SciPy compute it) when a sample has fewer
//!    than 30 values;
//! 2. skewness (the population formula m3 / m2^1.5), symmetric when |skewness| < 1;
//! 3. both normal and symmetric: Welch's t-test; otherwise the two-sided Wilcoxon rank-sum
//!    (Mann–Whitney U) test, normal approximation with tie and continuity correction;
//! 4. the verdict at level α, with an effect size (Cohen's d, or the rank-biserial correlation)
//!    and the Hodges–Lehmann shift with its confidence interval (as `wilcox.test(conf.int=TRUE)`).
//!
//! Distributions come from `statrs`; every test is checked against SciPy/statsmodels values in
//! `tests/fixtures/compare/` (with the script that made them).

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// Below this many values, Shapiro–Wilk decides normality instead of Lilliefors.
pub const SMALL_SAMPLE: usize = 30;

/// Above this many values per side, the Hodges–Lehmann interval is computed on this many evenly
/// spaced order statistics (the pairwise differences of millions of values do not fit in
/// memory); the interval is then that of the smaller sample, i.e. wider, never narrower.
pub const HL_MAX: usize = 2000;

/// Why a comparison cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// A sample has too few values.
    #[error("{0}: needs at least 3 values, has {1}")]
    TooFew(&'static str, usize),
    /// A sample holds a value that is not a finite number.
    #[error("{0}: holds a value that is not a finite number")]
    NotFinite(&'static str),
    /// All values of a sample are equal: no spread to test.
    #[error("{0}: all values are equal")]
    NoSpread(&'static str),
}

/// A test statistic and its p-value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TestResult {
    /// The statistic (D, W, t, U).
    pub statistic: f64,
    /// Its p-value.
    pub p: f64,
}

/// One sample described.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Describe {
    /// Values.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Standard deviation (n − 1).
    pub sd: f64,
    /// Population skewness m3 / m2^1.5.
    pub skewness: f64,
    /// The normality test used and its result.
    pub normality: Normality,
}

/// Which normality test, and what it said.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Normality {
    /// `lilliefors` or `shapiro-wilk`.
    pub test: &'static str,
    /// Statistic and p-value.
    pub result: TestResult,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Level of the tests.
    pub alpha: f64,
    /// Sample A.
    pub a: Describe,
    /// Sample B.
    pub b: Describe,
    /// `welch-t` or `wilcoxon-rank-sum`.
    pub test: &'static str,
    /// Why that test.
    pub why: String,
    /// Statistic and p-value of the test used.
    pub result: TestResult,
    /// Welch's t-test (always computed, for the record).
    pub welch: Welch,
    /// The rank-sum test (always computed, for the record).
    pub rank_sum: RankSum,
    /// Cohen's d (mean difference over the pooled standard deviation).
    pub cohens_d: f64,
    /// Rank-biserial correlation: 2·U/(n₁n₂) − 1, from −1 (A always smaller) to 1.
    pub rank_biserial: f64,
    /// Difference of the sample medians, A − B.
    pub median_difference: f64,
    /// Hodges–Lehmann shift A − B and its confidence interval at 1 − α.
    pub shift: Shift,
    /// Whether H0 (no difference) is rejected.
    pub different: bool,
    /// Which way the difference goes, by the sign of the test's own statistic: A's latencies
    /// are the smaller (meaningful when `different`).
    pub a_faster: bool,
    /// One line for people.
    pub verdict: String,
}

/// Welch's unequal-variance t-test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Welch {
    /// t statistic.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// The Wilcoxon rank-sum / Mann–Whitney U test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RankSum {
    /// U of sample A (R's W).
    pub u: f64,
    /// Standardized statistic after the continuity correction.
    pub z: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// A location shift estimate and its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Shift {
    /// Median of the pairwise differences.
    pub estimate: f64,
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// Confidence level.
    pub level: f64,
    /// Whether the samples were thinned to [`HL_MAX`] order statistics for it.
    pub thinned: bool,
}

fn normal() -> Normal {
    Normal::standard()
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Sample variance (n − 1).
fn variance(x: &[f64]) -> f64 {
    let m = mean(x);
    x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() as f64 - 1.0)
}

fn median_sorted(x: &[f64]) -> f64 {
    let n = x.len();
    if n % 2 == 1 {
        x[n / 2]
    } else {
        (x[n / 2 - 1] + x[n / 2]) / 2.0
    }
}

fn sorted(x: &[f64]) -> Vec<f64> {
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Population skewness, m3 / m2^1.5 (`moments::skewness`, `scipy.stats.skew(bias=True)`).
pub fn skewness(x: &[f64]) -> f64 {
    let m = mean(x);
    let n = x.len() as f64;
    let m2 = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n;
    let m3 = x.iter().map(|v| (v - m).powi(3)).sum::<f64>() / n;
    m3 / m2.powf(1.5)
}

/// The Lilliefors test for normality (nortest's `lillie.test`).
pub fn lilliefors(x: &[f64]) -> TestResult {
    let s = sorted(x);
    let n = s.len() as f64;
    let (m, sd) = (mean(&s), variance(&s).sqrt());
    let norm = normal();
    let mut d: f64 = 0.0;
    for (i, v) in s.iter().enumerate() {
        let p = norm.cdf((v - m) / sd);
        let i = i as f64;
        d = d.max((i + 1.0) / n - p).max(p - i / n);
    }
    TestResult {
        statistic: d,
        p: lilliefors_p(d, s.len()),
    }
}

/// nortest's p-value for the Lilliefors statistic `d` of `n` values.
fn lilliefors_p(d: f64, n: usize) -> f64 {
    let nf = n as f64;
    let (kd, nd) = if n <= 100 {
        (d, nf)
    } else {
        (d * (nf / 100.0).powf(0.49), 100.0)
    };
    let p = (-7.01256 * kd * kd * (nd + 2.78019) + 2.99587 * kd * (nd + 2.78019).sqrt() - 0.122119
        + 0.974598 / nd.sqrt()
        + 1.67997 / nd)
        .exp();
    if p <= 0.1 {
        return p;
    }
    let kk = (nf.sqrt() - 0.01 + 0.85 / nf.sqrt()) * d;
    let poly = |c: [f64; 5]| c[0] + kk * (c[1] + kk * (c[2] + kk * (c[3] + kk * c[4])));
    let p = if kk <= 0.302 {
        1.0
    } else if kk <= 0.5 {
        poly([2.76773, -19.828315, 80.709644, -138.55152, 81.218052])
    } else if kk <= 0.9 {
        poly([-4.901232, 40.662806, -97.490286, 94.029866, -32.355711])
    } else if kk <= 1.31 {
        poly([6.198765, -19.558097, 23.186922, -12.024045, 2.334091])
    } else {
        0.0
    };
    p.clamp(0.0, 1.0)
}

/// `c[0] + c[1]·x + c[2]·x² + …`
fn poly(c: &[f64], x: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, k| acc * x + k)
}

/// The Shapiro–Wilk test (Royston 1995, AS R94), for 3 ≤ n ≤ 5000; `None` outside that range.
pub fn shapiro_wilk(x: &[f64]) -> Option<TestResult> {
    let n = x.len();
    if !(3..=5000).contains(&n) {
        return None;
    }
    let s = sorted(x);
    let range = s[n - 1] - s[0];
    if range <= 0.0 {
        return None;
    }
    let an = n as f64;
    let half = n / 2;
    // Coefficients a_1 … a_half for the largest values (the smallest take them negated).
    let mut a = vec![0.0; half];
    if n == 3 {
        a[0] = std::f64::consts::FRAC_1_SQRT_2;
    } else {
        let norm = normal();
        let m: Vec<f64> = (1..=half)
            .map(|i| norm.inverse_cdf((i as f64 - 0.375) / (an + 0.25)))
            .collect();
        let summ2 = 2.0 * m.iter().map(|v| v * v).sum::<f64>();
        let ssumm2 = summ2.sqrt();
        let rsn = 1.0 / an.sqrt();
        let c1 = [0.0, 0.221157, -0.147981, -2.071190, 4.434685, -2.706056];
        let c2 = [0.0, 0.042981, -0.293762, -1.752461, 5.682633, -3.582633];
        let a1 = poly(&c1, rsn) - m[0] / ssumm2;
        let (first, fac) = if n > 5 {
            let a2 = -m[1] / ssumm2 + poly(&c2, rsn);
            let fac = ((summ2 - 2.0 * m[0] * m[0] - 2.0 * m[1] * m[1])
                / (1.0 - 2.0 * a1 * a1 - 2.0 * a2 * a2))
                .sqrt();
            a[1] = a2;
            (2, fac)
        } else {
            let fac = ((summ2 - 2.0 * m[0] * m[0]) / (1.0 - 2.0 * a1 * a1)).sqrt();
            (1, fac)
        };
        a[0] = a1;
        for i in first..half {
            a[i] = -m[i] / fac;
        }
    }
    // W as the squared correlation of the ordered (range-scaled) data with the coefficients,
    // 1 − W computed directly to keep precision when W is close to 1.
    let coef = |i: usize| -> f64 {
        if i < half {
            -a[i]
        } else if i >= n - half {
            a[n - 1 - i]
        } else {
            0.0
        }
    };
    let xs: Vec<f64> = s.iter().map(|v| v / range).collect();
    let sa = (0..n).map(coef).sum::<f64>() / an;
    let sx = xs.iter().sum::<f64>() / an;
    let (mut ssa, mut ssx, mut sax) = (0.0, 0.0, 0.0);
    for (i, xi) in xs.iter().enumerate() {
        let asa = coef(i) - sa;
        let xsx = xi - sx;
        ssa += asa * asa;
        ssx += xsx * xsx;
        sax += asa * xsx;
    }
    let ssassx = (ssa * ssx).sqrt();
    let w1 = (ssassx - sax) * (ssassx + sax) / (ssa * ssx);
    let w = 1.0 - w1;
    if n == 3 {
        let p = 6.0 / std::f64::consts::PI * (w.sqrt().asin() - std::f64::consts::FRAC_PI_3);
        return Some(TestResult {
            statistic: w,
            p: p.max(0.0),
        });
    }
    let mut y = w1.ln();
    let (m, sd) = if n <= 11 {
        let gamma = poly(&[-2.273, 0.459], an);
        if y >= gamma {
            return Some(TestResult {
                statistic: w,
                p: 1e-99,
            });
        }
        y = -(gamma - y).ln();
        (
            poly(&[0.5440, -0.39978, 0.025054, -6.714e-4], an),
            poly(&[1.3822, -0.77857, 0.062767, -0.0020322], an).exp(),
        )
    } else {
        let xx = an.ln();
        (
            poly(&[-1.5861, -0.31082, -0.083751, 0.0038915], xx),
            poly(&[-0.4803, -0.082676, 0.0030302], xx).exp(),
        )
    };
    let p = normal().sf((y - m) / sd);
    Some(TestResult { statistic: w, p })
}

/// Welch's t-test, two-sided.
pub fn welch(x: &[f64], y: &[f64]) -> Welch {
    let (n1, n2) = (x.len() as f64, y.len() as f64);
    let (v1, v2) = (variance(x) / n1, variance(y) / n2);
    let t = (mean(x) - mean(y)) / (v1 + v2).sqrt();
    let df = (v1 + v2).powi(2) / (v1 * v1 / (n1 - 1.0) + v2 * v2 / (n2 - 1.0));
    let p = StudentsT::new(0.0, 1.0, df).map_or(f64::NAN, |d| 2.0 * d.sf(t.abs()));
    Welch { t, df, p }
}

/// The two-sided rank-sum test with tie and continuity correction (normal approximation).
pub fn rank_sum(x: &[f64], y: &[f64]) -> RankSum {
    let (n1, n2) = (x.len(), y.len());
    let mut all: Vec<(f64, bool)> = x
        .iter()
        .map(|v| (*v, true))
        .chain(y.iter().map(|v| (*v, false)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = all.len();
    let (mut r1, mut ties) = (0.0, 0.0);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        // Positions i..=j share the mean rank (1-based).
        let rank = (i + j) as f64 / 2.0 + 1.0;
        let t = (j - i + 1) as f64;
        ties += t * t * t - t;
        r1 += rank * all[i..=j].iter().filter(|(_, from_x)| *from_x).count() as f64;
        i = j + 1;
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let u = r1 - n1f * (n1f + 1.0) / 2.0;
    let mu = n1f * n2f / 2.0;
    let sigma = (n1f * n2f / 12.0 * ((nf + 1.0) - ties / (nf * (nf - 1.0)))).sqrt();
    let diff = u - mu;
    let z = if sigma > 0.0 {
        (diff - 0.5 * diff.signum()) / sigma
    } else {
        0.0
    };
    let p = (2.0 * normal().sf(z.abs())).min(1.0);
    RankSum { u, z, p }
}

/// Evenly spaced order statistics of a sorted sample, at most `k` of them.
fn thin(s: &[f64], k: usize) -> Vec<f64> {
    if s.len() <= k {
        return s.to_vec();
    }
    (0..k)
        .map(|i| s[(i as f64 * (s.len() - 1) as f64 / (k - 1) as f64).round() as usize])
        .collect()
}

/// The Hodges–Lehmann shift (median of all pairwise differences x − y) and its asymptotic
/// confidence interval (Moses), as `wilcox.test(conf.int = TRUE)` gives without ties.
pub fn hodges_lehmann(x: &[f64], y: &[f64], level: f64) -> Shift {
    let (sx, sy) = (sorted(x), sorted(y));
    let thinned = sx.len() > HL_MAX || sy.len() > HL_MAX;
    let (sx, sy) = (thin(&sx, HL_MAX), thin(&sy, HL_MAX));
    let mut d: Vec<f64> = Vec::with_capacity(sx.len() * sy.len());
    for a in &sx {
        for b in &sy {
            d.push(a - b);
        }
    }
    d.sort_by(f64::total_cmp);
    let (n1, n2) = (sx.len() as f64, sy.len() as f64);
    let z = normal().inverse_cdf(1.0 - (1.0 - level) / 2.0);
    let half = z * (n1 * n2 * (n1 + n2 + 1.0) / 12.0).sqrt();
    let m = d.len();
    let k = ((n1 * n2 / 2.0 - half).round().max(1.0) as usize).min(m);
    Shift {
        estimate: median_sorted(&d),
        low: d[k - 1],
        high: d[m - k],
        level,
        thinned,
    }
}

fn check(name: &'static str, x: &[f64]) -> Result<(), CompareError> {
    if x.len() < 3 {
        return Err(CompareError::TooFew(name, x.len()));
    }
    if x.iter().any(|v| !v.is_finite()) {
        return Err(CompareError::NotFinite(name));
    }
    if x.iter().all(|v| *v == x[0]) {
        return Err(CompareError::NoSpread(name));
    }
    Ok(())
}

fn describe(x: &[f64]) -> Describe {
    let s = sorted(x);
    let normality = if s.len() < SMALL_SAMPLE {
        Normality {
            test: "shapiro-wilk",
            result: shapiro_wilk(&s).unwrap_or(TestResult {
                statistic: f64::NAN,
                p: f64::NAN,
            }),
        }
    } else {
        Normality {
            test: "lilliefors",
            result: lilliefors(&s),
        }
    };
    Describe {
        n: s.len(),
        mean: mean(&s),
        median: median_sorted(&s),
        min: s[0],
        max: s[s.len() - 1],
        sd: variance(&s).sqrt(),
        skewness: skewness(&s),
        normality,
    }
}

/// Runs the whole procedure on samples `a` and `b` (same unit, e.g. ms) at level `alpha`.
///
/// # Errors
/// [`CompareError`] when a sample is too small, not finite or constant.
pub fn compare(a: &[f64], b: &[f64], alpha: f64, unit: &str) -> Result<Comparison, CompareError> {
    check("A", a)?;
    check("B", b)?;
    let (da, db) = (describe(a), describe(b));
    let normal_a = da.normality.result.p >= alpha;
    let normal_b = db.normality.result.p >= alpha;
    let symmetric = da.skewness.abs() < 1.0 && db.skewness.abs() < 1.0;
    let w = welch(a, b);
    let r = rank_sum(a, b);
    let (test, why, result) = if normal_a && normal_b && symmetric {
        (
            "welch-t",
            "both samples pass the normality test and are symmetric (|skewness| < 1)".to_owned(),
            TestResult {
                statistic: w.t,
                p: w.p,
            },
        )
    } else {
        let mut reasons = Vec::new();
        for (name, d, ok) in [("A", &da, normal_a), ("B", &db, normal_b)] {
            if !ok {
                reasons.push(format!(
                    "{name} is not normal ({} p = {:.3e})",
                    d.normality.test, d.normality.result.p
                ));
            }
            if d.skewness.abs() >= 1.0 {
                reasons.push(format!("{name} is skewed ({:.2})", d.skewness));
            }
        }
        (
            "wilcoxon-rank-sum",
            reasons.join("; "),
            TestResult {
                statistic: r.u,
                p: r.p,
            },
        )
    };
    let pooled = (((da.n - 1) as f64 * da.sd * da.sd + (db.n - 1) as f64 * db.sd * db.sd)
        / (da.n + db.n - 2) as f64)
        .sqrt();
    let cohens_d = (da.mean - db.mean) / pooled;
    let rank_biserial = 2.0 * r.u / (da.n as f64 * db.n as f64) - 1.0;
    let shift = hodges_lehmann(a, b, 1.0 - alpha);
    let different = result.p < alpha;
    let median_difference = da.median - db.median;
    let name = if test == "welch-t" {
        "Welch's t-test"
    } else {
        "Wilcoxon rank-sum"
    };
    // Which way the difference goes is the test's own statistic's sign: the mean difference for
    // Welch's test, U against its null mean for the rank sum. The Hodges–Lehmann shift can be 0
    // when the samples are whole milliseconds with many ties, and says nothing about the side.
    let a_smaller = if test == "welch-t" {
        da.mean < db.mean
    } else {
        rank_biserial < 0.0
    };
    let verdict = if different {
        format!(
            "A is {} than B: median {:.3} vs {:.3} {unit}, shift {:+.3} {unit} ({:.0} % CI {:+.3} … {:+.3}); {name} p = {:.3e} < {alpha}",
            if a_smaller { "faster" } else { "slower" },
            da.median,
            db.median,
            shift.estimate,
            shift.level * 100.0,
            shift.low,
            shift.high,
            result.p
        )
    } else {
        format!(
            "no significant difference: median {:.3} vs {:.3} {unit}; {name} p = {:.3e} >= {alpha}",
            da.median, db.median, result.p
        )
    };
    Ok(Comparison {
        alpha,
        a: da,
        b: db,
        test,
        why,
        result,
        welch: w,
        rank_sum: r,
        cohens_d,
        rank_biserial,
        median_difference,
        shift,
        different,
        a_faster: a_smaller,
        verdict,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hodges_lehmann_by_hand() {
        // Differences of {1,2,3} − {0,0}: 1,1,2,2,3,3 → median 2.
        let s = hodges_lehmann(&[1.0, 2.0, 3.0], &[0.0, 0.0], 0.95);
        assert_eq!(s.estimate, 2.0);
        assert!(s.low <= 2.0 && s.high >= 2.0 && !s.thinned);
    }

    #[test]
    fn rank_sum_by_hand() {
        // x = {1, 2}, y = {3, 4}: ranks of x are 1 and 2, U = 3 − 3 = 0.
        let r = rank_sum(&[1.0, 2.0], &[3.0, 4.0]);
        assert_eq!(r.u, 0.0);
        // mu = 2, sigma = sqrt(4/12 · 5) = 1.291; z = (0 − 2 + 0.5) / 1.291.
        assert!((r.z - (-1.5 / (20.0f64 / 12.0).sqrt())).abs() < 1e-12);
    }

    #[test]
    fn the_verdict_follows_the_rank_statistic_when_the_shift_is_zero() {
        // Whole milliseconds: A is 1 ms four times in five, B three times in five. Most pairwise
        // differences are 0, so the Hodges–Lehmann shift is 0, yet A is the faster.
        let sample = |ones: usize| -> Vec<f64> {
            (0..200).map(|i| if i < ones { 1.0 } else { 2.0 }).collect()
        };
        let (fast, slow) = (sample(160), sample(120));
        let c = compare(&fast, &slow, 0.05, "ms").unwrap();
        assert_eq!(c.test, "wilcoxon-rank-sum");
        assert_eq!(c.shift.estimate, 0.0);
        assert!(c.different, "{}", c.verdict);
        assert!(c.verdict.starts_with("A is faster"), "{}", c.verdict);
        let c = compare(&slow, &fast, 0.05, "ms").unwrap();
        assert!(c.verdict.starts_with("A is slower"), "{}", c.verdict);
    }

    #[test]
    fn bad_samples_are_refused_with_a_reason() {
        assert_eq!(
            compare(&[1.0, 2.0], &[1.0, 2.0, 3.0], 0.05, "ms"),
            Err(CompareError::TooFew("A", 2))
        );
        assert_eq!(
            compare(&[1.0, 2.0, 3.0], &[5.0, 5.0, 5.0], 0.05, "ms"),
            Err(CompareError::NoSpread("B"))
        );
        assert_eq!(
            compare(&[1.0, f64::NAN, 3.0], &[1.0, 2.0, 3.0], 0.05, "ms"),
            Err(CompareError::NotFinite("A"))
        );
    }
}
