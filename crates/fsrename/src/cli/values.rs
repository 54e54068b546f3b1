//! How the values given on the command line are read and checked: each parser refuses what it
//! cannot take with a message that names the input and lists only what is accepted.

use std::time::Duration;

use fs_model::{FsPath, IndexLayout};
use fs_rename::Strategy;

/// A path in the tree as a person gives it: a `/` at the end (as shells complete a
/// directory, and `ls -R` prints one) is accepted and says that the path is a directory's;
/// a verb refuses it for a file, as Unix does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathArg {
    path: FsPath,
    dir: bool,
}

impl PathArg {
    /// The path, without its trailing `/`.
    pub fn path(&self) -> &FsPath {
        &self.path
    }

    /// Whether it was given with a trailing `/`: it must be a directory.
    pub fn names_dir(&self) -> bool {
        self.dir
    }

    /// The path as given (with its `/`, if it had one).
    pub fn as_given(&self) -> String {
        if self.dir {
            format!("{}/", self.path)
        } else {
            self.path.to_string()
        }
    }
}

impl std::str::FromStr for PathArg {
    type Err = fs_model::PathError;

    fn from_str(s: &str) -> Result<PathArg, fs_model::PathError> {
        let (path, dir) = FsPath::parse_input(s)?;
        Ok(PathArg { path, dir })
    }
}

/// A type of the JSON contract, for `fsrename schema NAME`.
pub(super) fn parse_type_name(s: &str) -> Result<String, String> {
    let types = crate::contract::TYPES;
    if types.iter().any(|t| t.name == s) {
        return Ok(s.to_owned());
    }
    let names: Vec<&str> = types.iter().map(|t| t.name).collect();
    Err(format!(
        "`{s}` is not a type of the JSON contract: expected one of {}",
        names.join(", ")
    ))
}

/// A limit on how many results are shown: 1 to 10 000.
pub(super) fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=10_000).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a number from 1 to 10000")),
    }
}

/// A number of bytes, with an optional binary unit: `4096`, `64K`, `64KiB`, `1MiB`, `2G`.
pub(super) fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a size: a number of bytes, or with K, KiB, M, MiB, G, GiB");
    let digits = s.trim().trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &s.trim()[digits.len()..];
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).ok_or_else(bad)
}

/// Parses `30s`, `500ms`, `2m`, `1h 30m`.
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration like 30s, 500ms or 2m: {e}"))
}

/// The shortest lease taken: a holder renews every third of its lease, with a request to the
/// store each time, so a shorter one is lost before a renewal can land (and `0s` at once).
const SHORTEST_LEASE: Duration = Duration::from_millis(100);

/// A lease: a duration of at least [`SHORTEST_LEASE`].
pub(super) fn parse_lease(s: &str) -> Result<Duration, String> {
    let lease = parse_duration(s)?;
    if lease < SHORTEST_LEASE {
        return Err(format!(
            "a lease of `{s}` would be lost before its holder could renew it (every third of the lease): give at least 100ms"
        ));
    }
    Ok(lease)
}

/// A number of shards of the tree index: 1 to [`fs_model::MAX_SHARDS`].
pub(super) fn parse_shards(s: &str) -> Result<u32, String> {
    let shards = s.parse::<u32>().map_err(|_| {
        format!(
            "`{s}` is not a number of shards (a whole number from 1 to {})",
            fs_model::MAX_SHARDS
        )
    })?;
    IndexLayout::default()
        .with_shards(shards)
        .map_err(|e| e.to_string())?;
    Ok(shards)
}

/// A number of replicas: 0 to [`fs_model::MAX_REPLICAS`].
pub(super) fn parse_replicas(s: &str) -> Result<u32, String> {
    let replicas = s.parse::<u32>().map_err(|_| {
        format!(
            "`{s}` is not a number of replicas (a whole number from 0 to {})",
            fs_model::MAX_REPLICAS
        )
    })?;
    IndexLayout::default()
        .with_replicas(replicas)
        .map_err(|e| e.to_string())?;
    Ok(replicas)
}

/// A page size: at least 1.
pub(super) fn parse_page_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "`{s}` is not a page size (a whole number of at least 1)"
        )),
    }
}

/// Bulk requests of a rename under way at once: 1 to 64.
pub(super) fn parse_in_flight(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{s}` is not a number of bulk requests in flight (a whole number from 1 to 64)"
        )),
    }
}

/// The demo's slow-down factor: 0 to 100.
pub(super) fn parse_slow(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=100.0).contains(&f) => Ok(f),
        _ => Err(format!(
            "`{s}` is not a slow-down factor (a number from 0 to 100: 1 is a pace to watch)"
        )),
    }
}

/// An address for `serve` to listen on (port 7070 unless given).
pub(super) fn parse_listen_serve(s: &str) -> Result<std::net::SocketAddr, String> {
    parse_listen(s, 7070)
}

/// An address for `demo --serve` to listen on (port 8080 unless given).
pub(super) fn parse_listen_demo(s: &str) -> Result<std::net::SocketAddr, String> {
    parse_listen(s, 8080)
}

/// An address to listen on: `HOST:PORT`, `[IPV6]:PORT`, or a host alone on `default_port`;
/// a host name (`localhost`) is resolved, its first IPv4 address preferred, as a user who
/// types `localhost` and then opens `http://localhost:PORT` expects either to work.
///
/// A port alone (`7074`, or `:7074`) is that port on 127.0.0.1, the loopback address the
/// default listens on: a number is never read as an IPv4 address in one piece (`7074` would
/// be 0.0.27.162), which nobody means.
pub(super) fn parse_listen(s: &str, default_port: u16) -> Result<std::net::SocketAddr, String> {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
    let digits = s.strip_prefix(':').unwrap_or(s);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let port = digits.parse::<u16>().map_err(|_| {
            format!("`{s}` is not a port to listen on: a port is a number from 0 to 65535")
        })?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = s.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let with_port = if s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
    }) {
        s.to_owned()
    } else if s.contains(':') {
        return Err(format!(
            "`{s}` is not an address to listen on: expected HOST:PORT, HOST (port {default_port}) or PORT (on 127.0.0.1), e.g. 127.0.0.1:{default_port}, localhost or {default_port}"
        ));
    } else {
        format!("{s}:{default_port}")
    };
    let found: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .map_err(|e| format!("`{s}` is not an address to listen on: {e}"))?
        .collect();
    found
        .iter()
        .find(|a| a.is_ipv4())
        .or(found.first())
        .copied()
        .ok_or_else(|| format!("`{s}` names no address to listen on"))
}

/// A locking scheme a job may take: `none` exists only for the demonstration, so it is
/// neither accepted nor offered.
pub(super) fn parse_strategy(s: &str) -> Result<Strategy, String> {
    crate::contract::job::submittable_strategy(s)
}

#[cfg(test)]
mod tests {
    use super::{parse_listen, parse_replicas, parse_shards};

    #[test]
    fn shards_and_replicas_out_of_range_are_named() {
        assert_eq!(parse_shards("3"), Ok(3));
        assert_eq!(parse_shards("1024"), Ok(1024));
        for bad in ["0", "1025"] {
            let e = parse_shards(bad).expect_err(bad);
            assert!(
                e.contains(&format!("`{bad}`")) && e.contains("1 to 1024"),
                "{e}"
            );
        }
        let e = parse_shards("-1").expect_err("negative");
        assert!(e.contains("`-1`"), "{e}");
        assert_eq!(parse_replicas("0"), Ok(0));
        let e = parse_replicas("65").expect_err("65");
        assert!(e.contains("`65`") && e.contains("0 to 64"), "{e}");
    }

    #[test]
    fn listen_takes_a_host_alone_a_name_or_host_and_port() {
        let at = |s: &str| parse_listen(s, 7070).map(|a| a.to_string());
        assert_eq!(at("127.0.0.1:9000"), Ok("127.0.0.1:9000".to_owned()));
        assert_eq!(at("127.0.0.1"), Ok("127.0.0.1:7070".to_owned()));
        assert_eq!(at("[::1]:9000"), Ok("[::1]:9000".to_owned()));
        assert_eq!(at("::1"), Ok("[::1]:7070".to_owned()));
        // A name is resolved (here from the hosts file), IPv4 first.
        assert_eq!(at("localhost"), Ok("127.0.0.1:7070".to_owned()));
        assert_eq!(at("localhost:9000"), Ok("127.0.0.1:9000".to_owned()));
        let bad = at("localhost:http:x").expect_err("two colons and no address");
        assert!(
            bad.contains("expected HOST:PORT, HOST (port 7070) or PORT (on 127.0.0.1)"),
            "{bad}"
        );
    }

    #[test]
    fn listen_on_a_port_alone_is_that_port_on_loopback() {
        let at = |s: &str| parse_listen(s, 7070).map(|a| a.to_string());
        // Once read as the IPv4 address 0.0.27.162 on the default port.
        assert_eq!(at("7074"), Ok("127.0.0.1:7074".to_owned()));
        assert_eq!(at(":7074"), Ok("127.0.0.1:7074".to_owned()));
        assert_eq!(at("0"), Ok("127.0.0.1:0".to_owned()));
        let bad = at("70000").expect_err("not a port");
        assert!(bad.contains("a number from 0 to 65535"), "{bad}");
    }
}
