//! One S3 object read in one GET, its byte ranges landing straight in new `bytes` objects.
//!
//! Why: a shard reader wants a few hundred slices of an 11 MB object. Through object_store each body chunk is
//! handed across tokio's threads, joined into one buffer and then sliced in Python: two copies of every byte
//! after the kernel's and about 0.8 ms of client CPU a MB, what the compiled minio-go ceiling spends on its
//! whole loop. Here the calling thread (GIL released) signs the GET (rusty-s3, SigV4 query signing), reads the
//! body on a pooled blocking connection (ureq) and reads each range straight into its `bytes` object: big
//! reads bypass ureq's buffer, so a plain-HTTP body crosses from the kernel into its final place once. No
//! runtime, no threads: safe in a forked child.

use std::io::{self, Read};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyConnectionError, PyException, PyFileNotFoundError, PyPermissionError, PyTimeoutError,
                       PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::Unfilled;

create_exception!(workbench_native, SizeMismatch, PyException, "The object is not the size the caller expected: args (actual,).");

/// How long a signed URL stays valid: it is used at once, so this only covers a clock skew.
const SIGNED_FOR: Duration = Duration::from_secs(900);

/// Why a read failed, worded as object_store words its errors, so the Python side maps both with one mapper.
enum Failure {
    NotFound(String),
    Denied(String),
    Timeout(String),
    Size(u64),
    Other(String),
}

impl Failure {
    fn into_py(self, key: &str) -> PyErr {
        match self {
            Failure::NotFound(text) => PyFileNotFoundError::new_err((2, text, key.to_string())),
            Failure::Denied(text) => PyPermissionError::new_err(text),
            Failure::Timeout(text) => PyTimeoutError::new_err(text),
            Failure::Size(actual) => SizeMismatch::new_err((actual,)),
            Failure::Other(text) => PyConnectionError::new_err(text),
        }
    }
}

fn transport(error: ureq::Transport) -> Failure {
    let text = format!("error sending request: {error}\n\nDebug source:\n{error:#?}");
    if text.contains("TimedOut") || text.contains("timed out") {
        Failure::Timeout(text)
    } else {
        Failure::Other(text)
    }
}

fn status(code: u16, response: ureq::Response) -> Failure {
    let mut body = String::new();
    let _ = response.into_reader().take(4096).read_to_string(&mut body);
    let text = format!("Received non-2xx status code: {code}: {body}");
    match code {
        404 => Failure::NotFound(text),
        401 | 403 => Failure::Denied(format!("{text} (403 Forbidden)")),
        _ => Failure::Other(text),
    }
}

fn body_failed(error: io::Error) -> Failure {
    let text = format!("error decoding response body: {error} ({:?})", error.kind());
    match error.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Failure::Timeout(text),
        _ => Failure::Other(text),
    }
}

/// Ranges as (offset, length) pairs, checked: in order, apart, inside the object (they are read off one pass
/// over the body).
fn checked_ranges(flat: &[i64], size: u64) -> PyResult<Vec<(u64, u64)>> {
    if !flat.len().is_multiple_of(2) {
        return Err(PyValueError::new_err("ranges: an (offset, length) pair per range"));
    }
    let mut ranges = Vec::with_capacity(flat.len() / 2);
    let mut end = 0u64;
    for pair in flat.chunks_exact(2) {
        let (offset, length) = (u64::try_from(pair[0]).ok(), u64::try_from(pair[1]).ok());
        match (offset, length) {
            (Some(offset), Some(length)) if offset >= end && offset.checked_add(length).is_some_and(|e| e <= size) => {
                end = offset + length;
                ranges.push((offset, length));
            }
            _ => {
                return Err(PyValueError::new_err(format!(
                    "range ({}, {}) is out of order, overlaps the one before or runs past {size} bytes",
                    pair[0], pair[1])));
            }
        }
    }
    Ok(ranges)
}

/// A new `bytes` object of `length` bytes left unfilled (pyo3's `PyBytes::new_with` zeroes it first: a memset
/// of every byte read); `Unfilled::of` says where to write them.
pub(crate) fn unfilled(py: Python<'_>, length: usize) -> PyResult<Bound<'_, PyBytes>> {
    // SAFETY: a null source asks CPython for an uninitialised object of this size; its caller hands it to
    // Python only once every byte is written (on an error it is dropped unseen).
    unsafe {
        Ok(Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), length as isize))?
            .downcast_into_unchecked::<PyBytes>())
    }
}

/// `bytes` objects made in the calling thread, kept unseen until one `S3RangeReader.read_ranges` fills them.
///
/// Why: glibc gives each thread that allocates its own heap (arena), and each heap keeps its own high-water
/// mark. A shard reader's GETs run on a pool of threads; pieces made there spread over one heap per thread
/// (s3-shards at 20,000 samples: 7 heaps of 40-54 MB). Made by the one thread that submits the GETs and
/// consumes the samples, they share its heap, which reuses what the consumer frees.
#[pyclass(frozen, module = "workbench_native")]
pub struct Reserved {
    bodies: Mutex<Vec<Py<PyBytes>>>,
}

/// `Reserved` pieces of these lengths (a buffer of int64), made now in this thread.
#[pyfunction]
pub(crate) fn reserve(py: Python<'_>, lengths: PyBuffer<i64>) -> PyResult<Reserved> {
    let mut bodies = Vec::new();
    for length in lengths.to_vec(py)? {
        let length = usize::try_from(length).map_err(|_| PyValueError::new_err(format!("length {length} < 0")))?;
        bodies.push(unfilled(py, length)?.unbind());
    }
    Ok(Reserved { bodies: Mutex::new(bodies) })
}

impl Reserved {
    /// All the bodies, taken out for one read (none left for another).
    pub(crate) fn take_all(&self) -> Vec<Py<PyBytes>> {
        std::mem::take(&mut *self.bodies.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The bodies, taken out for one read; they go back with `put_back` if it fails (a retry reads into them).
    fn take(&self, py: Python<'_>, ranges: &[(u64, u64)]) -> PyResult<Vec<Py<PyBytes>>> {
        let bodies = self.take_all();
        let fits = bodies.len() == ranges.len()
            && bodies.iter().zip(ranges).all(|(body, &(_, length))| body.bind(py).as_bytes().len() as u64 == length);
        if !fits {
            let reason = if bodies.is_empty() { "was read into already" } else { "does not match the ranges" };
            self.put_back(bodies);
            return Err(PyValueError::new_err(format!("reserved: {reason}; reserve the ranges' lengths anew")));
        }
        Ok(bodies)
    }

    fn put_back(&self, bodies: Vec<Py<PyBytes>>) {
        *self.bodies.lock().unwrap_or_else(|e| e.into_inner()) = bodies;
    }
}

/// GETs of one bucket whose bodies are read as byte ranges into `bytes` objects, one call per object.
#[pyclass(frozen, module = "workbench_native")]
pub struct S3RangeReader {
    agent: ureq::Agent,
    bucket: Bucket,
    credentials: Credentials,
}

#[pymethods]
impl S3RangeReader {
    #[new]
    #[pyo3(signature = (endpoint, bucket, access_key, secret_key, region, *, timeout_s, connections = 64,
                        root_certificate = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(endpoint: &str, bucket: &str, access_key: &str, secret_key: &str, region: &str, timeout_s: f64,
           connections: usize, root_certificate: Option<&str>) -> PyResult<Self> {
        let timeout = Duration::from_secs_f64(timeout_s);
        let url = endpoint.parse().map_err(|e| PyValueError::new_err(format!("S3 endpoint {endpoint}: {e}")))?;
        let bucket = Bucket::new(url, UrlStyle::Path, bucket.to_string(), region.to_string())
            .map_err(|e| PyValueError::new_err(format!("S3 bucket {bucket} at {endpoint}: {e}")))?;
        let mut agent = ureq::AgentBuilder::new()
            .timeout_connect(timeout)
            .timeout_read(timeout) // each read of a body: a stalled transfer ends here
            .timeout_write(timeout)
            .max_idle_connections(connections)
            .max_idle_connections_per_host(connections)
            .redirects(0);
        if let Some(pem) = root_certificate {
            // the configured CA is the only trusted root, as with the obstore store and boto3's verify=
            let mut roots = rustls::RootCertStore::empty();
            for certificate in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let certificate = certificate
                    .map_err(|e| PyValueError::new_err(format!("root_certificate: not a PEM certificate ({e})")))?;
                roots
                    .add(certificate)
                    .map_err(|e| PyValueError::new_err(format!("root_certificate: unusable ({e})")))?;
            }
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| PyValueError::new_err(format!("TLS settings: {e}")))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            agent = agent.tls_config(Arc::new(config));
        }
        Ok(S3RangeReader { agent: agent.build(), bucket, credentials: Credentials::new(access_key, secret_key) })
    }

    /// GET `key`, which must be `size` bytes (else `SizeMismatch(actual)`), and return each of `ranges` (a
    /// buffer of int64 (offset, length) pairs, in order, apart) as a `bytes` object: new ones, or those of
    /// `reserved` (`reserve` of the ranges' lengths; kept there for a retry if this fails). Missing key:
    /// FileNotFoundError; refused: PermissionError; stalled: TimeoutError; anything else: ConnectionError, each
    /// with the server's words.
    #[pyo3(signature = (key, size, ranges, reserved = None))]
    fn read_ranges<'py>(&self, py: Python<'py>, key: &str, size: u64, ranges: PyBuffer<i64>,
                        reserved: Option<&Reserved>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let ranges = checked_ranges(&ranges.to_vec(py)?, size)?;
        let bodies: Vec<Bound<'py, PyBytes>> = match reserved {
            Some(reserved) => reserved.take(py, &ranges)?.into_iter().map(|body| body.into_bound(py)).collect(),
            None => ranges.iter().map(|&(_, length)| unfilled(py, length as usize)).collect::<PyResult<_>>()?,
        };
        let targets: Vec<(u64, Unfilled)> =
            ranges.iter().zip(&bodies).map(|(&(offset, _), body)| (offset, Unfilled::of(body))).collect();
        let url = self.bucket.get_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let read = py.allow_threads(move || {
            let response = self.agent.get(url.as_str()).call().map_err(|error| match error {
                ureq::Error::Status(code, response) => status(code, response),
                ureq::Error::Transport(error) => transport(error),
            })?;
            let length = response.header("Content-Length").and_then(|v| v.parse::<u64>().ok());
            if length.is_some_and(|actual| actual != size) {
                return Err(Failure::Size(length.unwrap_or(0)));
            }
            let mut body = response.into_reader();
            let mut at = 0u64;
            for (offset, target) in targets {
                io::copy(&mut (&mut body).take(offset - at), &mut io::sink()).map_err(body_failed)?;
                // SAFETY: each target is a bytes object of exactly this size that Python has not seen: new, or
                // held only by a `Reserved` (no accessor) and now by `bodies`, alive until this returns.
                let buffer = unsafe { std::slice::from_raw_parts_mut(target.0, target.1) };
                // a body that ends before its Content-Length is a broken connection (transient), not a short object
                body.read_exact(buffer).map_err(body_failed)?;
                at = offset + target.1 as u64;
            }
            // the rest (the tar's end blocks): read to the end, so the connection goes back to the pool
            let rest = io::copy(&mut body, &mut io::sink()).map_err(body_failed)?;
            if at + rest != size {
                return Err(Failure::Size(at + rest));
            }
            Ok(())
        });
        match read {
            Ok(()) => Ok(bodies),
            Err(failure) => {
                if let Some(reserved) = reserved {
                    reserved.put_back(bodies.into_iter().map(Bound::unbind).collect());
                }
                Err(failure.into_py(key))
            }
        }
    }
}
