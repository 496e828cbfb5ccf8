//! Batch reads for the workbench's loaders, outside the GIL.
//!
//! Why: through obstore each S3 GET is one blocking Python call: the calling thread hands the request to
//! tokio's threads and sleeps until its body is back, so every GET costs two thread handoffs and a GIL
//! round, and 16-32 Python threads take turns at the GIL. Here the loader's one thread submits requests
//! (a task each, no wait) and collects whatever has finished in one call that releases the GIL: the
//! handoffs are per call, not per GET. Local files get the same: one call reads many, straight into the
//! `bytes` objects it returns. Big objects read as many slices (shards): `ranges`.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    Attribute, BackoffConfig, Certificate, ClientOptions, GetOptions, ObjectStore, RetryConfig,
};
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyPermissionError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;

mod ranges;

/// What one request ended with: (body, user metadata) or (error kind, message).
type Outcome = Result<(Bytes, HashMap<String, String>), (&'static str, String)>;

fn kind_of(error: &object_store::Error) -> &'static str {
    match error {
        object_store::Error::NotFound { .. } => "not_found",
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => "denied",
        _ => "other",
    }
}

/// The error as obstore words it (its message, then the debug form of its sources), so the Python side reads
/// both clients' failures with the same patterns.
fn failed(error: object_store::Error) -> (&'static str, String) {
    (kind_of(&error), format!("{error}\n\nDebug source:\n{error:#?}"))
}

async fn get(store: Arc<dyn ObjectStore>, path: Path) -> Outcome {
    let result = store.get_opts(&path, GetOptions::default()).await.map_err(failed)?;
    let metadata = result
        .attributes
        .iter()
        .filter_map(|(key, value)| match key {
            Attribute::Metadata(name) => Some((name.to_string(), value.to_string())),
            _ => None,
        })
        .collect();
    let size = (result.range.end - result.range.start) as usize;
    let mut stream = result.into_stream();
    let mut whole: Option<Bytes> = None; // a body in one chunk stays that chunk
    let mut joined: Option<BytesMut> = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(failed)?;
        match (&mut joined, whole.take()) {
            (Some(buffer), _) => buffer.extend_from_slice(&chunk),
            (None, None) => whole = Some(chunk),
            (None, Some(first)) => {
                let mut buffer = BytesMut::with_capacity(size.max(first.len() + chunk.len()));
                buffer.extend_from_slice(&first);
                buffer.extend_from_slice(&chunk);
                joined = Some(buffer);
            }
        }
    }
    let data = joined.map(BytesMut::freeze).or(whole).unwrap_or_default();
    Ok((data, metadata))
}

/// GETs on one S3 bucket, any number in flight, finished ones collected in batches.
#[pyclass(frozen, module = "workbench_native")]
struct S3Fetcher {
    store: Arc<dyn ObjectStore>,
    runtime: Runtime,
    sender: mpsc::Sender<(u64, Outcome)>,
    receiver: Mutex<mpsc::Receiver<(u64, Outcome)>>,
    running: Mutex<HashMap<u64, AbortHandle>>,
}

#[pymethods]
impl S3Fetcher {
    #[new]
    #[pyo3(signature = (endpoint, bucket, access_key, secret_key, region, *, timeout_s, connections = 64,
                        root_certificate = None, threads = 1, max_retries = 2))]
    #[allow(clippy::too_many_arguments)]
    fn new(endpoint: &str, bucket: &str, access_key: &str, secret_key: &str, region: &str, timeout_s: f64,
           connections: usize, root_certificate: Option<&str>, threads: usize, max_retries: usize) -> PyResult<Self> {
        let timeout = Duration::from_secs_f64(timeout_s);
        let mut client = ClientOptions::new()
            .with_allow_http(endpoint.starts_with("http://"))
            .with_connect_timeout(timeout)
            .with_read_timeout(timeout) // a stalled body ends here, retried by `retry`
            .with_timeout(Duration::from_secs(3600)) // whole request: big shards on slow links
            .with_pool_max_idle_per_host(connections);
        if let Some(pem) = root_certificate {
            let certificate = Certificate::from_pem(pem.as_bytes())
                .map_err(|e| PyValueError::new_err(format!("root_certificate: not a PEM certificate ({e})")))?;
            client = client.with_root_certificate(certificate);
        }
        let retry = RetryConfig {
            max_retries,
            retry_timeout: timeout,
            backoff: BackoffConfig { init_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(1), base: 2.0 },
        };
        let store = AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_bucket_name(bucket)
            .with_access_key_id(access_key)
            .with_secret_access_key(secret_key)
            .with_region(region)
            .with_virtual_hosted_style_request(false)
            .with_client_options(client)
            .with_retry(retry)
            .build()
            .map_err(|e| PyValueError::new_err(format!("S3 store for bucket {bucket} at {endpoint}: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("wb-s3")
            .enable_all()
            .build()
            .map_err(|e| PyOSError::new_err(format!("starting the S3 fetcher's threads: {e}")))?;
        let (sender, receiver) = mpsc::channel();
        Ok(S3Fetcher {
            store: Arc::new(store),
            runtime,
            sender,
            receiver: Mutex::new(receiver),
            running: Mutex::new(HashMap::new()),
        })
    }

    /// Start GET `key` and return at once; `wait` hands back its outcome under `token`.
    fn submit(&self, token: u64, key: &str) {
        let (store, sender) = (self.store.clone(), self.sender.clone());
        let path = Path::parse(key); // the key as it is, as obstore takes it (`Path::from` would percent-encode it)
        let mut running = self.running.lock().unwrap(); // held until it is recorded: `wait` removes it after
        let task = self.runtime.spawn(async move {
            let outcome = match path {
                Ok(path) => get(store, path).await,
                Err(error) => Err(failed(error.into())),
            };
            let _ = sender.send((token, outcome));
        });
        running.insert(token, task.abort_handle());
    }

    /// Outcomes of finished requests, at least one and at most `most`, waiting up to `timeout_s` for the first
    /// (an empty list: none finished in time). Each is (token, body, metadata, None) or (token, None, None,
    /// (kind, message)) with kind "not_found", "denied" or "other". Bodies are `bytes` (one copy, here).
    #[allow(clippy::type_complexity)]
    fn wait<'py>(&self, py: Python<'py>, timeout_s: f64, most: usize)
            -> Vec<(u64, Option<Bound<'py, PyBytes>>, Option<HashMap<String, String>>, Option<(&'static str, String)>)> {
        let finished = py.allow_threads(|| {
            let receiver = self.receiver.lock().unwrap();
            let mut finished = Vec::new();
            if let Ok(first) = receiver.recv_timeout(Duration::from_secs_f64(timeout_s.max(0.0))) {
                finished.push(first);
                while finished.len() < most.max(1) {
                    match receiver.try_recv() {
                        Ok(next) => finished.push(next),
                        Err(_) => break,
                    }
                }
            }
            finished
        });
        let mut running = self.running.lock().unwrap();
        finished
            .into_iter()
            .map(|(token, outcome)| {
                running.remove(&token);
                match outcome {
                    Ok((data, metadata)) => (token, Some(PyBytes::new(py, &data)), Some(metadata), None),
                    Err(error) => (token, None, None, Some(error)),
                }
            })
            .collect()
    }

    /// How many submitted requests have not been handed back by `wait`.
    fn outstanding(&self) -> usize {
        self.running.lock().unwrap().len()
    }

    /// Abandon every outstanding request and drop outcomes not yet collected.
    fn cancel_all(&self) {
        for (_, task) in self.running.lock().unwrap().drain() {
            task.abort();
        }
        let receiver = self.receiver.lock().unwrap();
        while receiver.try_recv().is_ok() {}
    }
}

fn os_error(path: &str, error: std::io::Error) -> PyErr {
    let errno = error.raw_os_error().unwrap_or(0);
    let args = (errno, error.to_string(), path.to_string());
    match error.kind() {
        std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(args),
        std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(args),
        _ => PyOSError::new_err(args),
    }
}

/// A `bytes` object made to be filled outside the GIL: no other code sees it before `read_files` returns it.
pub(crate) struct Unfilled(pub(crate) *mut u8, pub(crate) usize);
unsafe impl Send for Unfilled {}

impl Unfilled {
    /// Where to write `body`'s bytes (all of them) while the GIL is released.
    pub(crate) fn of(body: &Bound<'_, PyBytes>) -> Self {
        let bytes = body.as_bytes();
        Unfilled(bytes.as_ptr() as *mut u8, bytes.len())
    }
}

/// Read whole files, in order, into `bytes` objects, without the GIL but for one moment to make them: one call
/// for a loader's request of many small files, and no copy after the read. With `reserved` (`reserve` of the
/// sizes the files had at ingest, made in the consuming thread), each file whose size is still the one reserved
/// is read into its reserved object; any other gets a new one.
#[pyfunction]
#[pyo3(signature = (paths, reserved = None))]
fn read_files<'py>(py: Python<'py>, paths: Vec<String>, reserved: Option<&ranges::Reserved>)
        -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let mut spare = reserved.map(ranges::Reserved::take_all).unwrap_or_default().into_iter();
    let opened = py
        .allow_threads(|| {
            paths
                .iter()
                .enumerate()
                .map(|(index, path)| {
                    let file = File::open(path).map_err(|e| (index, e))?;
                    let size = file.metadata().map_err(|e| (index, e))?.len() as usize;
                    Ok((file, size))
                })
                .collect::<Result<Vec<_>, (usize, std::io::Error)>>()
        })
        .map_err(|(index, error)| os_error(&paths[index], error))?;
    let mut bodies = Vec::with_capacity(opened.len());
    let mut targets = Vec::with_capacity(opened.len());
    for (_, size) in &opened {
        let body = match spare.next().map(|body| body.into_bound(py)) {
            Some(body) if body.as_bytes().len() == *size => body,
            _ => ranges::unfilled(py, *size)?,
        };
        targets.push(Unfilled::of(&body));
        bodies.push(body);
    }
    let read = py.allow_threads(move || {
        for (index, ((mut file, _), target)) in opened.into_iter().zip(targets).enumerate() {
            // SAFETY: each target is a bytes object of exactly this size that Python has not seen: new, or
            // held only by a `Reserved` (no accessor) and now by `bodies`, alive until this returns.
            let buffer = unsafe { std::slice::from_raw_parts_mut(target.0, target.1) };
            file.read_exact(buffer).map_err(|e| (index, e))?;
        }
        Ok::<(), (usize, std::io::Error)>(())
    });
    match read {
        Ok(()) => Ok(bodies),
        Err((index, error)) => Err(os_error(&paths[index], error)),
    }
}

#[pymodule]
fn workbench_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<S3Fetcher>()?;
    module.add_function(wrap_pyfunction!(read_files, module)?)?;
    module.add_class::<ranges::S3RangeReader>()?;
    module.add_class::<ranges::Reserved>()?;
    module.add_function(wrap_pyfunction!(ranges::reserve, module)?)?;
    module.add("SizeMismatch", module.py().get_type::<ranges::SizeMismatch>())?;
    Ok(())
}
