//! The id checks: quick, and they name the document, where the search for an order can
//! only say that there is none. A document id is at one path at most; a new one needs a
//! call that makes documents; a start one can only go with a delete.

use std::collections::{BTreeMap, BTreeSet};

use super::Anomaly;
use crate::history::{Entry, History, Op, Outcome};

/// The id anomalies of `history`: duplicates, then unexplained ids, then lost ones, each
/// in id order.
pub(crate) fn check_ids(history: &History) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();

    let mut end_paths: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for entry in &history.end {
        end_paths
            .entry(entry.id.as_str())
            .or_default()
            .push(entry.path.clone());
    }
    for (id, paths) in &end_paths {
        if paths.len() > 1 {
            let mut paths = paths.clone();
            paths.sort();
            anomalies.push(Anomaly::DuplicateId {
                id: id.to_string(),
                paths,
            });
        }
    }

    // A call reported failed made nothing (if it did, the search finds it, as such).
    let may_have_acted = |outcome: &Outcome| !matches!(outcome, Outcome::Failed { .. });
    let start_ids: BTreeSet<&str> = history.start.iter().map(|e| e.id.as_str()).collect();

    let creates = history.calls.iter().any(|c| {
        may_have_acted(&c.outcome)
            && matches!(c.op, Op::Mkdir { .. } | Op::Touch { .. } | Op::Cp { .. })
    });
    if !creates {
        for (id, paths) in &end_paths {
            if !start_ids.contains(id) {
                for path in paths {
                    anomalies.push(Anomaly::UnexplainedId {
                        id: id.to_string(),
                        path: path.clone(),
                    });
                }
            }
        }
    }

    let removes = history
        .calls
        .iter()
        .any(|c| may_have_acted(&c.outcome) && matches!(c.op, Op::Rm { .. }));
    if !removes {
        let mut lost: Vec<&Entry> = history
            .start
            .iter()
            .filter(|e| !end_paths.contains_key(e.id.as_str()))
            .collect();
        lost.sort_by(|a, b| a.id.cmp(&b.id));
        let lost = lost.into_iter().map(|e| Anomaly::LostId {
            id: e.id.clone(),
            path: e.path.clone(),
        });
        anomalies.extend(lost);
    }
    anomalies
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Call, Kind, Via};

    fn entry(path: &str, id: &str) -> Entry {
        Entry {
            path: path.into(),
            id: id.into(),
            kind: Kind::Dir,
        }
    }

    fn call(op: Op, outcome: Outcome) -> Call {
        Call {
            client: "cli-0".into(),
            via: Via::Cli,
            op,
            invoked: 0,
            completed: 1,
            outcome,
        }
    }

    fn history(calls: Vec<Call>, end: Vec<Entry>) -> History {
        History {
            start: vec![entry("/", "R"), entry("/a", "A"), entry("/b", "B")],
            calls,
            faults: vec![],
            end,
        }
    }

    #[test]
    fn a_clean_end_has_no_id_anomaly() {
        let h = history(
            vec![],
            vec![entry("/", "R"), entry("/a", "A"), entry("/b", "B")],
        );
        assert_eq!(check_ids(&h), vec![]);
    }

    #[test]
    fn an_id_at_two_paths_is_a_duplicate() {
        let end = vec![
            entry("/", "R"),
            entry("/a", "A"),
            entry("/b", "B"),
            entry("/c", "A"),
        ];
        assert_eq!(
            check_ids(&history(vec![], end)),
            vec![Anomaly::DuplicateId {
                id: "A".into(),
                paths: vec!["/a".into(), "/c".into()],
            }]
        );
    }

    #[test]
    fn a_new_id_needs_a_call_that_creates() {
        let end = vec![
            entry("/", "R"),
            entry("/a", "A"),
            entry("/b", "B"),
            entry("/n", "N"),
        ];
        let failed = Outcome::Failed {
            error: "exists".into(),
        };
        let mkdir = Op::Mkdir { path: "/n".into() };
        assert_eq!(
            check_ids(&history(vec![call(mkdir.clone(), failed)], end.clone())),
            vec![Anomaly::UnexplainedId {
                id: "N".into(),
                path: "/n".into(),
            }]
        );
        let unknown = Outcome::Unknown {
            why: "killed".into(),
        };
        assert_eq!(check_ids(&history(vec![call(mkdir, unknown)], end)), vec![]);
    }

    #[test]
    fn a_start_id_goes_only_with_a_delete() {
        let end = vec![entry("/", "R"), entry("/b", "B")];
        assert_eq!(
            check_ids(&history(vec![], end.clone())),
            vec![Anomaly::LostId {
                id: "A".into(),
                path: "/a".into(),
            }]
        );
        let rm = call(Op::Rm { path: "/a".into() }, Outcome::Ok);
        assert_eq!(check_ids(&history(vec![rm], end)), vec![]);
    }
}
