//! Trusting a CA by its fingerprint: one TLS handshake that reads the certificates a server
//! presents, to find the one whose SHA-256 the user gave.
//!
//! Elasticsearch 8 makes its own CA at first start and prints that CA's SHA-256 fingerprint,
//! so that a client can trust the cluster without copying a file. The official client has no
//! hook to check a fingerprint during its own handshakes, so the certificate is found before
//! the client is built and becomes its CA: every later connection then checks the full chain
//! and the host name against it, as with a CA file.

use std::io::ErrorKind;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use elasticsearch::http::Url;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};

/// How long the handshake that reads the certificates may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Returns the DER of the CA certificate whose SHA-256 (64 lowercase hex digits) is
/// `fingerprint`, among those the server at `node` presents.
///
/// # Errors
/// [`StoreError::Backend`] if the server cannot be reached or does not speak TLS;
/// [`StoreError::Rejected`] if no certificate it presents has that fingerprint, or only its
/// own (a server's own certificate is not a CA that can vouch for it).
pub(super) fn find_ca(node: &Url, fingerprint: &str) -> Result<Vec<u8>> {
    let origin = node.origin().ascii_serialization();
    let context = format!("reading the certificates {origin} presents");
    let backend = |message: String| StoreError::Backend {
        context: context.clone(),
        message,
    };
    let host = node
        .host_str()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
        .ok_or_else(|| backend("the URL has no host".to_owned()))?;
    let port = node.port_or_known_default().unwrap_or(443);
    let chain = presented_chain(host, port).map_err(|e| match e.kind() {
        ErrorKind::InvalidData => backend(format!(
            "{origin} does not answer in TLS ({e}): a fingerprint needs an https:// URL of a TLS port"
        )),
        _ => backend(format!("cannot connect to {origin}: {e}")),
    })?;
    let sums: Vec<String> = chain.iter().map(|cert| sha256_hex(cert)).collect();
    match sums.iter().position(|sum| sum == fingerprint) {
        Some(0) if chain.len() > 1 => Err(StoreError::rejected(
            &context,
            format!(
                "{fingerprint} is the SHA-256 of {origin}'s own certificate, not of a CA: give the fingerprint of the CA that signed it ({})",
                sums[1..].join(", ")
            ),
        )),
        Some(at) => Ok(chain[at].to_vec()),
        None => Err(StoreError::rejected(
            &context,
            format!(
                "no certificate {origin} presents has the SHA-256 {fingerprint} (its own has {}{}); is it this server's CA?",
                sums.first().map_or("none", String::as_str),
                if sums.len() > 1 {
                    format!(", and the others it sends {}", sums[1..].join(", "))
                } else {
                    String::new()
                }
            ),
        )),
    }
}

/// Shakes hands with `host:port` and returns the certificates the server presents, its own
/// first. The signatures of the handshake are checked; the chain is not (that is the point).
pub(super) fn presented_chain(
    host: &str,
    port: u16,
) -> std::io::Result<Vec<CertificateDer<'static>>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let verifier = Arc::new(Recorder {
        seen: seen.clone(),
        provider: provider.clone(),
    });
    let invalid = |e: rustls::Error| std::io::Error::new(ErrorKind::InvalidData, e);
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(invalid)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
    let mut tls = rustls::ClientConnection::new(Arc::new(config), name).map_err(invalid)?;
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(ErrorKind::NotFound, "no address for the host"))?;
    let mut tcp = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)?;
    tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    tcp.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp)?;
    }
    let chain = seen
        .lock()
        .map_err(|_| std::io::Error::other("the certificate recorder panicked"))?
        .clone();
    Ok(chain)
}

fn sha256_hex(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A verifier that keeps the chain it is shown and accepts it: used only to read a server's
/// certificates, never for a connection that carries a request.
#[derive(Debug)]
struct Recorder {
    seen: Arc<Mutex<Vec<CertificateDer<'static>>>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let mut seen = self
            .seen
            .lock()
            .map_err(|_| rustls::Error::General("the certificate recorder panicked".into()))?;
        seen.push(end_entity.clone().into_owned());
        seen.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
