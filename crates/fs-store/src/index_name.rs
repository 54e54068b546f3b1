//! Elasticsearch's rules for index names, so the embedded store refuses what a server would.

use crate::error::{Result, StoreError};

/// Checks `name` against Elasticsearch's index-name rules: lowercase, not empty, at most 255
/// bytes, none of `\ / * ? " < > | , #`, space or `:`, not starting with `-`, `_` or `+`, and not
/// `.` or `..`.
///
/// # Errors
/// [`StoreError::Rejected`] naming the index and the rule it breaks.
pub fn validate_index_name(name: &str) -> Result<()> {
    let broken = if name.is_empty() {
        Some("must not be empty")
    } else if name.len() > 255 {
        Some("must be at most 255 bytes")
    } else if name == "." || name == ".." {
        Some("must not be `.` or `..`")
    } else if name.starts_with(['-', '_', '+']) {
        Some("must not start with `-`, `_` or `+`")
    } else if name.chars().any(|c| c.is_uppercase()) {
        Some("must be lowercase")
    } else if name
        .chars()
        .any(|c| "\\/*?\"<>|,# :".contains(c) || c.is_control())
    {
        Some("must not contain `\\ / * ? \" < > | , # :`, spaces or control characters")
    } else {
        None
    };
    match broken {
        Some(rule) => Err(StoreError::rejected(
            format!("index name `{}`", name.escape_debug()),
            format!("an index name {rule}"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_defaults_and_rejects_the_rest() {
        assert!(validate_index_name("fs").is_ok());
        assert!(validate_index_name("fs-lock").is_ok());
        for bad in ["", "Fs", "_fs", "a b", "a/b", "a*", ".", "a:b"] {
            let err = validate_index_name(bad).expect_err(bad);
            assert!(err.to_string().contains("index name"), "{err}");
        }
    }
}
