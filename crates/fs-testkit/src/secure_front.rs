//! [`SecureFront`]: a real TLS and authentication front (Debian's nginx) on loopback, in
//! front of a test's server, answering as a secured Elasticsearch does.
//!
//! It serves one upstream on four ports: TLS with a certificate for `127.0.0.1` and
//! `localhost` signed by a CA the test made ([`SecureFront::url`]), the same with a certificate
//! for another name ([`SecureFront::wrong_name_url`]), with an expired one
//! ([`SecureFront::expired_url`]), and plain HTTP ([`SecureFront::plain_url`]). Every port asks
//! for credentials: basic authentication ([`SecureFront::USER`], [`SecureFront::READER`]) or an
//! API key ([`SecureFront::API_KEY`]). Refusals carry Elasticsearch's security bodies: 401
//! `security_exception` for credentials it does not know, and 403 "action [...] is unauthorized
//! for user [reader] ... on indices [...]" for [`SecureFront::READER`] on the one index the
//! test names, so that fsrename's messages are tried on the shapes a real cluster sends.
//!
//! nginx comes from Debian (`apt-get install nginx`, which `.ci/run` does); the binary is
//! found through `FSRENAME_NGINX_BIN`, else at `/usr/sbin/nginx`, else on the `PATH`.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use sha2::{Digest, Sha256};

/// A running nginx in front of one upstream; stopped when dropped.
pub struct SecureFront {
    nginx: Child,
    dir: tempfile::TempDir,
    ports: [u16; 4],
    ca_fingerprint: String,
}

impl SecureFront {
    /// The user with every privilege.
    pub const USER: &'static str = "fsrename";
    /// [`SecureFront::USER`]'s password.
    pub const PASSWORD: &'static str = "front-door-pw";
    /// A user that may do everything except on the index given to [`SecureFront::start`].
    pub const READER: &'static str = "reader";
    /// [`SecureFront::READER`]'s password.
    pub const READER_PASSWORD: &'static str = "reader-pw";
    /// An API key with every privilege, as `id:key` (fsrename encodes it).
    pub const API_KEY: &'static str = "front-key-id:front-key-secret";
    /// An API key the cluster revoked: it answers 401 as Elasticsearch does for one.
    pub const REVOKED_API_KEY: &'static str = "revoked-key-id:revoked-key-secret";

    /// Starts nginx in front of `upstream` (`http://127.0.0.1:PORT`), refusing
    /// [`SecureFront::READER`] every request on `denied_index`.
    ///
    /// # Panics
    /// If nginx is missing or does not start: a test that asked for it cannot run without.
    pub fn start(upstream: &str, denied_index: &str) -> SecureFront {
        let dir = tempfile::tempdir().expect("a directory for nginx");
        let pki = Pki::make(dir.path());
        let upstream = upstream
            .trim_end_matches('/')
            .strip_prefix("http://")
            .expect("an http:// upstream");
        let mut last = String::new();
        // The ports are found free and then given to nginx, so another process may take one
        // in between: try again with others.
        for _ in 0..5 {
            let ports = free_ports();
            let config = config(dir.path(), &ports, upstream, denied_index);
            std::fs::write(dir.path().join("nginx.conf"), config).expect("writing nginx.conf");
            let mut nginx = Command::new(nginx_bin())
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .arg("-e")
                .arg(dir.path().join("error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start nginx ({e}): .ci/run installs it (apt-get install nginx)")
                });
            if listening(&mut nginx, &ports) {
                return SecureFront {
                    nginx,
                    dir,
                    ports,
                    ca_fingerprint: pki.ca_fingerprint,
                };
            }
            let _ = nginx.kill();
            let _ = nginx.wait();
            last = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
        }
        panic!("nginx did not start: {last}");
    }

    /// `https://127.0.0.1:PORT`: a certificate for this host, signed by [`SecureFront::ca_file`].
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports[0])
    }

    /// A TLS port whose certificate (signed by the same CA) names another host.
    pub fn wrong_name_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports[1])
    }

    /// A TLS port whose certificate (signed by the same CA) expired in 2021.
    pub fn expired_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports[2])
    }

    /// A plain HTTP port, with the same credentials.
    pub fn plain_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports[3])
    }

    /// The port of [`SecureFront::url`], for a URL of one's own.
    pub fn tls_port(&self) -> u16 {
        self.ports[0]
    }

    /// The PEM file of the CA that signed the front's certificates.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The PEM file of another CA, which signed none of them.
    pub fn other_ca_file(&self) -> PathBuf {
        self.dir.path().join("other-ca.pem")
    }

    /// The SHA-256 of the CA's certificate, as Elasticsearch 8 prints its own: hex pairs
    /// joined by colons, upper case.
    pub fn ca_fingerprint(&self) -> &str {
        &self.ca_fingerprint
    }

    /// Writes `secret` to a file of its own in the front's directory (a key or password file)
    /// and returns its path.
    pub fn secret_file(&self, name: &str, secret: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        let mut file = std::fs::File::create(&path).expect("a secret file");
        writeln!(file, "{secret}").expect("writing a secret file");
        path
    }
}

impl Drop for SecureFront {
    fn drop(&mut self) {
        // One process (`master_process off`): killing it leaves no worker behind.
        let _ = self.nginx.kill();
        let _ = self.nginx.wait();
    }
}

fn nginx_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("FSRENAME_NGINX_BIN").filter(|b| !b.is_empty()) {
        return bin.into();
    }
    let debian = Path::new("/usr/sbin/nginx");
    if debian.exists() {
        debian.to_owned()
    } else {
        "nginx".into()
    }
}

/// Four ports free now on loopback.
fn free_ports() -> [u16; 4] {
    let listeners: Vec<TcpListener> = (0..4)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    let port = |i: usize| listeners[i].local_addr().expect("a bound port").port();
    [port(0), port(1), port(2), port(3)]
}

/// Waits until nginx accepts connections on every port; false if it exited first.
fn listening(nginx: &mut Child, ports: &[u16; 4]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = nginx.try_wait() {
            return false;
        }
        let up = ports.iter().all(|port| {
            let addr = SocketAddr::from(([127, 0, 0, 1], *port));
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        });
        if up {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The certificates, made fresh for each front.
struct Pki {
    ca_fingerprint: String,
}

impl Pki {
    /// Writes `ca.pem`, `other-ca.pem`, and a key and chain (the server's certificate, then
    /// the CA's, as Elasticsearch 8 sends them) for each TLS port: `good`, `wrong-name`,
    /// `expired`.
    fn make(dir: &Path) -> Pki {
        let ca = make_ca("fsrename test CA");
        let other = make_ca("fsrename other CA");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("ca.pem");
        std::fs::write(dir.join("other-ca.pem"), other.pem()).expect("other-ca.pem");
        let leaves: [(&str, Vec<String>, bool); 3] = [
            ("good", vec!["127.0.0.1".into(), "localhost".into()], false),
            ("wrong-name", vec!["elsewhere.invalid".into()], false),
            (
                "expired",
                vec!["127.0.0.1".into(), "localhost".into()],
                true,
            ),
        ];
        for (name, sans, expired) in leaves {
            let key = KeyPair::generate().expect("a key");
            let mut params = CertificateParams::new(sans).expect("names");
            params
                .distinguished_name
                .push(DnType::CommonName, format!("fsrename test {name}"));
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            if expired {
                params.not_before = date_time_ymd(2020, 1, 1);
                params.not_after = date_time_ymd(2021, 1, 1);
            }
            let cert = params.signed_by(&key, &ca).expect("a certificate");
            let chain = format!("{}{}", cert.pem(), ca.pem());
            std::fs::write(dir.join(format!("{name}.pem")), chain).expect("a chain");
            std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).expect("a key");
        }
        let ca_fingerprint = Sha256::digest(ca.der())
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        Pki { ca_fingerprint }
    }
}

fn make_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().expect("a key");
    CertifiedIssuer::self_signed(params, key).expect("a CA")
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

fn api_key(key: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// nginx's configuration: one process, in `dir`, with the auth and refusals of a secured
/// Elasticsearch.
fn config(dir: &Path, ports: &[u16; 4], upstream: &str, denied: &str) -> String {
    let dir = dir.display();
    // As root, nginx would hand its work to `nobody`, who cannot read the test's directory.
    let user = if running_as_root() { "user root;" } else { "" };
    let writer = basic(SecureFront::USER, SecureFront::PASSWORD);
    let reader = basic(SecureFront::READER, SecureFront::READER_PASSWORD);
    let key = api_key(SecureFront::API_KEY);
    // Elasticsearch's body, but for its `header` field (escaped quotes do not survive
    // nginx's strings); the header itself is sent.
    let unauthenticated = r#"{"error":{"root_cause":[{"type":"security_exception","reason":"unable to authenticate with provided credentials and anonymous access is not allowed for this request"}],"type":"security_exception","reason":"unable to authenticate with provided credentials and anonymous access is not allowed for this request"},"status":401}"#;
    let forbidden = format!(
        r#"{{"error":{{"root_cause":[{{"type":"security_exception","reason":"action [$fs_action] is unauthorized for user [reader] with roles [viewer] on indices [{denied}], this action is granted by the index privileges [$fs_privileges]"}}],"type":"security_exception","reason":"action [$fs_action] is unauthorized for user [reader] with roles [viewer] on indices [{denied}], this action is granted by the index privileges [$fs_privileges]"}},"status":403}}"#
    );
    let server = |port: u16, tls: Option<&str>| {
        let listen = match tls {
            Some(name) => format!(
                "listen 127.0.0.1:{port} ssl;\n    ssl_certificate {dir}/{name}.pem;\n    ssl_certificate_key {dir}/{name}.key;"
            ),
            None => format!("listen 127.0.0.1:{port};"),
        };
        format!(
            r#"
  server {{
    {listen}
    default_type application/json;
    location / {{
      if ($fs_who = "") {{
        add_header WWW-Authenticate 'Basic realm="security" charset="UTF-8"' always;
        return 401 '{unauthenticated}';
      }}
      if ($fs_denied) {{
        return 403 '{forbidden}';
      }}
      proxy_pass http://{upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "";
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 120s;
    }}
  }}"#
        )
    };
    let servers = [
        server(ports[0], Some("good")),
        server(ports[1], Some("wrong-name")),
        server(ports[2], Some("expired")),
        server(ports[3], None),
    ]
    .concat();
    let denied_re = regex_escape(denied);
    format!(
        r#"{user}
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  client_max_body_size 0;
  keepalive_requests 100000;
  map_hash_bucket_size 256;
  map $http_authorization $fs_who {{
    default "";
    "Basic {writer}" writer;
    "Basic {reader}" reader;
    "ApiKey {key}" writer;
  }}
  map "$fs_who $uri" $fs_denied {{
    default "";
    "~^reader /{denied_re}(/|$)" 1;
  }}
  map "$request_method $uri" $fs_action {{
    default "indices:data/write/index";
    "~/_search" "indices:data/read/search";
    "~/_count" "indices:data/read/search";
    "~/_mget" "indices:data/read/mget";
    "~/_bulk" "indices:data/write/bulk";
    "~/_update" "indices:data/write/update";
    "~/_refresh" "indices:admin/refresh";
    "~^(GET|HEAD) /[^/]+/_doc" "indices:data/read/get";
    "~^(GET|HEAD) " "indices:admin/get";
    "~^PUT /[^/]+$" "indices:admin/create";
    "~^DELETE /[^/]+$" "indices:admin/delete";
    "~^DELETE " "indices:data/write/delete";
  }}
  map $fs_action $fs_privileges {{
    default "create_doc,create,index,write,all";
    "~^indices:data/read" "read,all";
    "~^indices:admin" "manage,all";
  }}
{servers}
}}
"#
    )
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = ".^$*+?()[]{}|\\".contains(c);
            special.then_some('\\').into_iter().chain(Some(c))
        })
        .collect()
}

fn running_as_root() -> bool {
    // The effective user of this process, from the kernel: no libc call needed.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}
