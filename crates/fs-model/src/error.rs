//! The error type for path validation and path arithmetic.

/// Why a string is not a valid [`FsPath`](crate::FsPath), or why a path operation failed.
///
/// Every variant names the offending input so a message can be shown to a user as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path does not start with `/`.
    #[error("path `{path}` is not absolute: it must start with `/`")]
    NotAbsolute {
        /// The rejected input.
        path: String,
    },
    /// The path contains `//`, an empty component.
    #[error("path `{path}` has an empty component (`//`)")]
    EmptyComponent {
        /// The rejected input.
        path: String,
    },
    /// The path contains a `.` or `..` component.
    #[error("path `{path}` has a `{component}` component; paths must be normalised")]
    DotComponent {
        /// The rejected input.
        path: String,
        /// The offending component, `.` or `..`.
        component: String,
    },
    /// The path ends with `/` and is not the root.
    #[error("path `{path}` ends with `/`; only the root `/` may")]
    TrailingSlash {
        /// The rejected input.
        path: String,
    },
    /// The path contains NUL or another control character.
    #[error("path `{path}` contains the control character U+{code:04X}")]
    ControlCharacter {
        /// The rejected input, with control characters escaped.
        path: String,
        /// The code point of the first control character found.
        code: u32,
    },
    /// The path is longer than [`MAX_PATH_BYTES`](crate::MAX_PATH_BYTES).
    #[error("path `{path}` is {len} bytes long; the limit is {max} bytes")]
    TooLong {
        /// The rejected input, shortened for display.
        path: String,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A component is longer than [`MAX_COMPONENT_BYTES`](crate::MAX_COMPONENT_BYTES).
    #[error("path `{path}` has a component of {len} bytes; the limit is {max} bytes")]
    ComponentTooLong {
        /// The rejected input, shortened for display.
        path: String,
        /// The length in bytes of the first component over the limit.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A name given to [`FsPath::join`](crate::FsPath::join) is not a single valid component.
    #[error("name `{name}` is not a valid path component")]
    InvalidName {
        /// The rejected name.
        name: String,
    },
    /// [`FsPath::rebase`](crate::FsPath::rebase) was asked to move a path that is not inside `from`.
    #[error("path `{path}` is not inside `{from}`")]
    NotInside {
        /// The path being rebased.
        path: String,
        /// The prefix it should lie under.
        from: String,
    },
    /// A name pattern ([`NameGlob`](crate::NameGlob)) that cannot be parsed.
    #[error("name pattern `{pattern}` is not valid: {message}")]
    BadPattern {
        /// The rejected pattern.
        pattern: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A `Result` whose error is a [`PathError`].
pub type Result<T, E = PathError> = std::result::Result<T, E>;
