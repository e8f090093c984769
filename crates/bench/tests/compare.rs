//! `pms_bench::compare` against reference values computed once with SciPy and statsmodels
//! (`tests/fixtures/compare/make_fixtures.py` wrote `reference.json`).

use pms_bench::compare;
use serde_json::Value;

fn reference() -> Value {
    let text = include_str!("fixtures/compare/reference.json");
    serde_json::from_str(text).expect("reference.json parses")
}

fn data(v: &Value) -> Vec<f64> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// `got` within `rel` of `want`, relatively.
fn near(got: f64, want: f64, rel: f64, what: &str) {
    let scale = want.abs().max(1e-300);
    assert!(
        ((got - want) / scale).abs() <= rel,
        "{what}: got {got:e}, SciPy says {want:e}"
    );
}

#[test]
fn skewness_and_lilliefors_match_scipy_and_statsmodels() {
    let r = reference();
    for (name, s) in r["samples"].as_object().unwrap() {
        let x = data(s);
        near(compare::skewness(&x), f(&s["skewness"]), 1e-9, name);
        if let Some(l) = s.get("lilliefors") {
            let got = compare::lilliefors(&x);
            near(got.statistic, f(&l["d"]), 1e-9, &format!("{name} D"));
            let want = f(&l["p_dallal_wilkinson"]);
            if want < 0.1 {
                near(got.p, want, 1e-9, &format!("{name} p"));
            } else {
                assert!(got.p > 0.1 - 1e-9, "{name}: nortest's p above 0.1 too");
            }
        }
    }
}

#[test]
fn shapiro_wilk_matches_scipy() {
    let r = reference();
    for (name, s) in r["samples"].as_object().unwrap() {
        let x = data(s);
        let got = compare::shapiro_wilk(&x).unwrap();
        let want = &s["shapiro"];
        near(got.statistic, f(&want["w"]), 1e-8, &format!("{name} W"));
        near(got.p, f(&want["p"]), 1e-6, &format!("{name} p"));
    }
}

#[test]
fn welch_and_rank_sum_match_scipy() {
    let r = reference();
    for pair in r["pairs"].as_array().unwrap() {
        let a = data(&r["samples"][pair["a"].as_str().unwrap()]);
        let b = data(&r["samples"][pair["b"].as_str().unwrap()]);
        let label = format!("{} vs {}", pair["a"], pair["b"]);
        let w = compare::welch(&a, &b);
        near(w.t, f(&pair["welch"]["t"]), 1e-9, &format!("{label} t"));
        near(w.df, f(&pair["welch"]["df"]), 1e-9, &format!("{label} df"));
        near(w.p, f(&pair["welch"]["p"]), 1e-7, &format!("{label} t p"));
        let u = compare::rank_sum(&a, &b);
        assert_eq!(u.u, f(&pair["mann_whitney"]["u"]), "{label} U");
        near(
            u.p,
            f(&pair["mann_whitney"]["p"]),
            1e-9,
            &format!("{label} U p"),
        );
    }
}

#[test]
fn the_procedure_picks_the_test_the_data_allow() {
    let r = reference();
    let s = |n: &str| data(&r["samples"][n]);
    // Two normal samples: Welch's t-test.
    let c = compare::compare(&s("normal_200"), &s("normal_200_shifted"), 0.05, "ms").unwrap();
    assert_eq!(c.test, "welch-t", "{}", c.why);
    assert_eq!(c.result.p, c.welch.p);
    // Right-skewed latencies: the rank-sum test, with a verdict and an interval around the
    // shift.
    let c = compare::compare(&s("lognormal_300_a"), &s("lognormal_300_b"), 0.05, "ms").unwrap();
    assert_eq!(c.test, "wilcoxon-rank-sum");
    assert!(c.why.contains("not normal"), "{}", c.why);
    assert!(c.different, "p = {}", c.result.p);
    assert!(c.verdict.starts_with("A is slower than B"), "{}", c.verdict);
    assert!(c.shift.low < c.shift.estimate && c.shift.estimate < c.shift.high);
    assert!(
        c.shift.low > 0.0,
        "the interval excludes 0 when the test rejects"
    );
    assert!(c.rank_biserial > 0.0 && c.rank_biserial < 1.0);
    // A sample against itself: no difference.
    let same = compare::compare(&s("normal_200"), &s("normal_200"), 0.05, "ms").unwrap();
    assert!(!same.different);
    assert!(
        same.verdict.starts_with("no significant difference"),
        "{}",
        same.verdict
    );
}
