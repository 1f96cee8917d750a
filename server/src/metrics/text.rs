//! The two text formats `/metrics` serves, and the checks the tests run on them.
//!
//! prometheus-client writes OpenMetrics 1.0: a counter family `x` is typed under `x` and its
//! sample is `x_total`, and the exposition ends in `# EOF`. A scraper that asks for it
//! (`Accept: application/openmetrics-text`, as Prometheus does) gets that. Everyone else —
//! curl, pnfs-bench, `promtool check metrics` (its parser reads only the 0.0.4 format) — gets
//! the Prometheus text format 0.0.4, the same lines with the counter's HELP and TYPE under
//! its `_total` name and no `# UNIT` or `# EOF` (prometheus/client_rust issue #51: the crate
//! writes only OpenMetrics).

/// `Content-Type` of each format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request's `Accept` asks for OpenMetrics.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// OpenMetrics text (as prometheus-client writes it) → Prometheus text format 0.0.4.
pub fn to_text_004(om: &str) -> String {
    let mut out = String::with_capacity(om.len() + 1024);
    // A family's HELP comes before its TYPE: held until the TYPE says whether it is renamed.
    let mut help: Option<(&str, &str)> = None;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let suffix = if kind == "counter" { "_total" } else { "" };
            if let Some((h, text)) = help.take().filter(|(h, _)| *h == name) {
                out.push_str(&format!("# HELP {h}{suffix} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// What is wrong with a 0.0.4 exposition by the Prometheus conventions pnfsd follows (its own
/// checks, beside `promtool check metrics`): every family has HELP and TYPE once, before its
/// samples; names are `pnfsd_` + snake case; counters end in `_total` and nothing else does;
/// a histogram has `_sum`, `_count` and a `_bucket{le="+Inf"}` per label set, and every
/// sample belongs to the family typed last. Empty when all is well.
pub fn problems(text: &str) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut bad = Vec::new();
    let mut helps = BTreeSet::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    let mut inf: BTreeMap<String, usize> = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let valid = |n: &str| {
        n.starts_with("pnfsd_")
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, h) = rest.split_once(' ').unwrap_or((rest, ""));
            if h.trim().is_empty() {
                bad.push(format!("{name}: empty HELP"));
            }
            if !helps.insert(name.to_string()) {
                bad.push(format!("{name}: HELP twice"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if !helps.contains(name) {
                bad.push(format!("{name}: TYPE without a HELP before it"));
            }
            if types.insert(name.into(), kind.into()).is_some() {
                bad.push(format!("{name}: TYPE twice"));
            }
            if !valid(name) {
                bad.push(format!("{name}: not a pnfsd_ snake-case name"));
            }
            match kind {
                "counter" if !name.ends_with("_total") => {
                    bad.push(format!("{name}: a counter not ending in _total"))
                }
                "gauge" | "histogram" if name.ends_with("_total") => {
                    bad.push(format!("{name}: a {kind} ending in _total"))
                }
                "counter" | "gauge" | "histogram" => {}
                k => bad.push(format!("{name}: type {k:?}")),
            }
            current = Some((name.into(), kind.into()));
            continue;
        }
        if line.starts_with('#') {
            bad.push(format!("stray comment {line:?}"));
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let sample = &line[..name_end];
        let value_ok = line
            .rsplit(' ')
            .next()
            .is_some_and(|v| v.parse::<f64>().is_ok() || v == "+Inf");
        if !value_ok {
            bad.push(format!("{line:?}: no number"));
        }
        let Some((family, kind)) = &current else {
            bad.push(format!("{sample}: a sample before any TYPE"));
            continue;
        };
        let ok = match kind.as_str() {
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| sample.strip_suffix(s) == Some(family)),
            _ => sample == family,
        };
        if !ok {
            bad.push(format!("{sample}: not a sample of {family} ({kind})"));
        }
        if kind == "histogram" {
            if sample.ends_with("_bucket") && line.contains("le=\"+Inf\"") {
                *inf.entry(family.clone()).or_default() += 1;
            }
            if sample.ends_with("_count") {
                *counts.entry(family.clone()).or_default() += 1;
            }
        }
    }
    for (name, kind) in &types {
        if kind == "histogram" && inf.get(name) != counts.get(name) {
            bad.push(format!(
                "{name}: a label set without _bucket{{le=\"+Inf\"}}"
            ));
        }
    }
    for h in &helps {
        if !types.contains_key(h) {
            bad.push(format!("{h}: HELP without TYPE"));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    const OM: &str = "# HELP pnfsd_x Things.\n# TYPE pnfsd_x counter\npnfsd_x_total 3\n\
        # HELP pnfsd_g A gauge.\n# TYPE pnfsd_g gauge\npnfsd_g 1\n\
        # HELP pnfsd_h_seconds Lat.\n# TYPE pnfsd_h_seconds histogram\n# UNIT pnfsd_h_seconds seconds\n\
        pnfsd_h_seconds_sum 0.5\npnfsd_h_seconds_count 1\n\
        pnfsd_h_seconds_bucket{le=\"1.0\"} 1\npnfsd_h_seconds_bucket{le=\"+Inf\"} 1\n# EOF\n";

    #[test]
    fn counters_take_their_total_name_and_the_openmetrics_lines_go() {
        let t = to_text_004(OM);
        assert!(t.starts_with(
            "# HELP pnfsd_x_total Things.\n# TYPE pnfsd_x_total counter\npnfsd_x_total 3\n"
        ));
        assert!(t.contains("# HELP pnfsd_g A gauge.\n# TYPE pnfsd_g gauge\npnfsd_g 1\n"));
        assert!(!t.contains("# EOF") && !t.contains("# UNIT"), "{t}");
        assert_eq!(problems(&t), Vec::<String>::new());
        // Served as OpenMetrics only when asked.
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;q=0.3"
        )));
        assert!(!wants_openmetrics(Some("*/*")) && !wants_openmetrics(None));
    }

    #[test]
    fn the_checks_catch_each_convention_broken() {
        let t = to_text_004(OM);
        let cases = [
            // OpenMetrics as is: the counter family is typed without _total.
            (OM.to_string(), "counter not ending in _total"),
            (
                t.replace("# HELP pnfsd_g A gauge.\n", ""),
                "TYPE without a HELP",
            ),
            (
                t.replace("pnfsd_h_seconds_bucket{le=\"+Inf\"} 1\n", ""),
                "+Inf",
            ),
            (
                t.replace("pnfsd_g", "pnfsd_g_total"),
                "gauge ending in _total",
            ),
            (
                t.replace("pnfsd_g 1", "pnfsd_other 1"),
                "not a sample of pnfsd_g",
            ),
            (t.replace("pnfsd_g", "pnfsd_G"), "snake-case"),
            (t.replace("pnfsd_g 1", "pnfsd_g x"), "no number"),
        ];
        for (text, want) in cases {
            let p = problems(&text);
            assert!(p.iter().any(|m| m.contains(want)), "{want}: {p:?}\n{text}");
        }
    }
}
