#!/usr/bin/env bash
# What produced results/gpu/: the GPU paths measured on lent NVIDIA H100 machines.
#
# That machine reaches no package registry, so everything it needs travels with the repo as a payload
# built here (see `payload` below): the Python packages the image lacks, installed here into a
# `--target` folder for CPython 3.12 (DALI 2.1 for CUDA 13 with nvImageCodec and nvJPEG, the
# cassandra-dali-plugin 1.3.2 for glibc 2.39, acsylla and the Python driver, pydantic...), a jlink'd
# Java 17 runtime and the Cassandra 5.0.6 jars, in one xz tarball split into parts small enough for one
# device call each (a call carries at most 64 MiB with the repo).
# Cassandra runs on the GPU machine itself (real server, loopback), so every reader sees the same table.
#
#   bash results/gpu/run.sh payload            # here: build .gpu/stage/, split into .gpu/part-N/
#   (one device call per part: copy .gpu/part-N/* to /tmp/parts while the machine stays warm)
#   bash results/gpu/run.sh unpack setup native   # there: unpack, start Cassandra, ingest, issue 13's bench
#   COUNT=5000 bash results/gpu/run.sh unpack setup depths   # there (a second machine): "auto" vs fixed depths
#
# Earlier runs (results of 2026-11-22, before the native driver) used the stages below as well:
#   bash results/gpu/run.sh setup decode       # there: install, start Cassandra, ingest, decode benches
#   bash results/gpu/run.sh train sweep        # there: ResNet-50 training fed from Cassandra; RTT sweep
#   bash results/gpu/run.sh setup workers      # there (a second machine): our loader in worker processes
#   bash results/gpu/run.sh setup0 secure      # there (a third): plugin + our loader over TLS with a login
#   bash results/gpu/run.sh setup workerstart  # there (a fourth): fetch workers by fork vs forkserver
set -euo pipefail
cd "$(dirname "$0")/../.."
PAYLOAD=${PAYLOAD:-/tmp/payload}
OUT=${OUT:-results/gpu/out}
COUNT=${COUNT:-10000}
DATASET=synthetic-classification-${COUNT}-s0
mkdir -p "$OUT"

environment() {
  export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
  local nv=/tmp/site/nvidia
  export LD_LIBRARY_PATH=$nv/cu13/lib:$nv/nvjpeg/lib:$nv/nvimgcodec:${LD_LIBRARY_PATH:-}
  export PATH=$PAYLOAD/jre/bin:$PATH
  export WORKBENCH_CACHE_DIR=$PAYLOAD/cache WORKBENCH_STATE_DIR=/tmp/stack WORKBENCH_TIMEOUT_S=30
  # a throwaway single-use node on loopback: no login (the security tests cover auth and TLS)
  export WORKBENCH_CASSANDRA_USERNAME= WORKBENCH_CASSANDRA_PASSWORD= WORKBENCH_IGNITE_USERNAME= \
         WORKBENCH_IGNITE_PASSWORD= WORKBENCH_S3_ACCESS_KEY=unused-here WORKBENCH_S3_SECRET_KEY=unused-here-too
}

# fn.crs4.cassandra has no default for username/password; a node without auth ignores them
PLUGIN_LOGIN="-o username=reader -o password=unused"

wb() { python3 -m workbench.cli "$@"; }

stage_payload() {
  local stage=.gpu/stage platforms=""
  for p in 39 34 28 27 24 17; do platforms="$platforms --platform manylinux_2_${p}_x86_64"; done
  rm -rf $stage/cache && mkdir -p $stage/whl $stage/cache  # nothing a stack run left there (built ceilings)
  cp -a ~/.cache/workbench/cassandra-5.0.6 $stage/cache/
  rm -f $stage/cache/cassandra-5.0.6/lib/*osx*
  [ -d $stage/jre ] || jlink --add-modules java.base,java.compiler,java.datatransfer,java.desktop,java.instrument,\
java.logging,java.management,java.management.rmi,java.naming,java.net.http,java.prefs,java.rmi,java.scripting,\
java.security.jgss,java.security.sasl,java.sql,java.transaction.xa,java.xml,jdk.attach,jdk.crypto.ec,\
jdk.internal.jvmstat,jdk.management,jdk.management.agent,jdk.naming.dns,jdk.net,jdk.unsupported,jdk.zipfs \
    --strip-debug --no-header-files --no-man-pages --compress=2 --output $stage/jre
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $platforms --platform manylinux2014_x86_64 -d $stage/whl \
    nvidia-dali-cuda130==2.1.0 "nvidia-nvimgcodec-cu13>=0.7,<0.8" nvidia-nvjpeg cassandra-dali-plugin==1.3.2 \
    acsylla==1.2.0 cassandra-driver==3.30.1 geomet pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings \
    python-dotenv annotated-types typing-inspection typing-extensions cryptography cffi pycparser bcrypt \
    astunparse gast optree nvtx makefun
  # installed here for CPython 3.12 (pyenv's, or $PYTHON312), so the machine there only unpacks; the other Pythons'
  # extension modules of DALI and nvImageCodec go (150 MB)
  rm -rf $stage/site
  "${PYTHON312:-$(pyenv root)/versions/3.12.1/bin/python3.12}" -m pip install -q --no-deps --no-compile --target $stage/site --only-binary=:all: \
    --python-version 3.12 --implementation cp $platforms --platform manylinux2014_x86_64 $stage/whl/*.whl
  find $stage/site -name "*cpython-3*" ! -name "*cpython-312-*" -delete
  # nvImageCodec's JPEG 2000, TIFF and OpenCV codecs (48 MB): the data is JPEG
  rm -f $stage/site/nvidia/nvimgcodec/extensions/lib{nvjpeg2k,nvtiff,opencv}_ext.so*
  tar cf - -C $stage site jre cache | xz -T2 -6 > $stage/payload.tar.xz
  rm -rf .gpu/part-*
  split -b 50M -d $stage/payload.tar.xz $stage/payload.part-
  for part in $stage/payload.part-*; do mkdir -p ".gpu/part-${part##*-}" && mv "$part" ".gpu/part-${part##*-}/"; done
  ls -la .gpu/part-*/
}

stage_unpack() {  # there: the parts copied to /tmp/parts by earlier calls (and this call's own part)
  mkdir -p /tmp/parts "$PAYLOAD"
  cp .gpu/part-*/payload.part-* /tmp/parts/ 2>/dev/null || true
  ls /tmp/parts
  cat /tmp/parts/payload.part-* | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, \
mode='r|xz').extractall(sys.argv[1], filter='tar')" "$PAYLOAD"
  rm -rf /tmp/site && mv "$PAYLOAD/site" /tmp/site
}

install_extra() {  # wheels added after payload.tar was built (cryptography, for the TLS certificates): .gpu/extra
  local extra=${EXTRA:-.gpu/extra}
  if [ -d "$extra" ]; then python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$extra"/*.whl; fi
}

stage_setup() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
  if [ -d "$PAYLOAD/whl" ]; then  # an older payload of wheels (the new one is installed here already)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$PAYLOAD"/whl/*.whl
  fi
  install_extra
  python3 -c "import importlib.metadata as m, torch, nvidia.dali as d; print('python', __import__('sys').version.split()[0], \
'torch', torch.__version__, 'dali', d.__version__, 'acsylla', m.version('acsylla'), 'cassandra-dali-plugin', \
m.version('cassandra-dali-plugin'), torch.cuda.get_device_name())" | tee -a "$OUT/gpu.txt"
  nproc | sed 's/^/cpus /' | tee -a "$OUT/gpu.txt"
  wb stack up ${SERVICES:-cassandra}  # the sweep stage needs toxiproxy too (SERVICES="cassandra toxiproxy")
  wb ingest --source "synthetic:$COUNT" --backend cassandra 2>&1 | tail -3 | tee "$OUT/ingest.txt"
}

stage_setup0() {  # install only (the secure stage starts its own nodes)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$PAYLOAD"/whl/*.whl
  install_extra
}

stage_decode() {
  local rows=$OUT/decode.jsonl
  for decode in none cpu mixed; do
    python3 -m pipelines.decode_bench --loader cassandra --dataset $DATASET --decode $decode --threads 8 \
      --results "$rows" -o batch_size=128 -o concurrency=32
    python3 -m pipelines.decode_bench --loader cassandra-plugin --native --dataset $DATASET --decode $decode \
      --threads 8 --results "$rows" -o batch_size=128 -o io_threads=4 -o prefetch_buffers=4 $PLUGIN_LOGIN
  done
}

stage_native() {  # issue 13's target: our loader on the C++ driver (acsylla) vs the real plugin, same table
  local rows=$OUT/native.jsonl same="-o batch_size=128 -o io_threads=4 -o prefetch_buffers=4"
  pair() {  # ours, then the plugin's own graph, with the plugin's parameter names and values
    python3 -m pipelines.decode_bench --loader cassandra --dataset $DATASET --decode "$1" --threads 8 \
      --results "$rows" $same
    python3 -m pipelines.decode_bench --loader cassandra-plugin --native --dataset $DATASET --decode "$1" \
      --threads 8 --results "$rows" $same $PLUGIN_LOGIN
  }
  # most wanted first: the run may meet the device's time limit (rows are appended as they finish)
  pair none; pair mixed
  python3 -m pipelines.decode_bench --loader cassandra-py --dataset $DATASET --decode none --threads 8 \
    --results "$rows" -o batch_size=128 -o concurrency=32  # the Python driver: the before
  for decode in none mixed; do  # our loader fetching in 4 worker processes (shared memory to this one)
    python3 -m pipelines.decode_bench --loader cassandra --dataset $DATASET --decode $decode --threads 8 \
      --fetch-workers 4 --results "$rows" $same
  done
  pair none; pair mixed
}

stage_depths() {  # a second machine: the window "auto" chose there (now recorded), fixed depths, fetch workers
  local rows=$OUT/depths.jsonl
  for decode in none mixed; do
    python3 -m pipelines.decode_bench --loader cassandra-plugin --native --dataset $DATASET --decode $decode \
      --threads 8 --results "$rows" -o batch_size=128 -o io_threads=4 -o prefetch_buffers=4 $PLUGIN_LOGIN
    for options in "-o io_threads=4" "-o io_threads=8 -o concurrency=256" "-o io_threads=4 -o concurrency=64 --fetch-workers 4"; do
      # shellcheck disable=SC2086
      python3 -m pipelines.decode_bench --loader cassandra --dataset $DATASET --decode $decode --threads 8 \
        --results "$rows" -o batch_size=128 -o prefetch_buffers=4 $options
    done
  done
}

stage_train() {
  local rows=$OUT/train
  python3 -m pipelines.train_torch --loader cassandra --dataset $DATASET --decode dali --dali-threads 8 \
    --steps 200 --batch-size 256 --results-dir "$rows" -o concurrency=32
  python3 -m pipelines.train_torch --loader cassandra-plugin --dataset $DATASET --decode dali --dali-threads 8 \
    --steps 200 --batch-size 256 --results-dir "$rows" -o io_threads=4 -o prefetch_buffers=4 $PLUGIN_LOGIN
  python3 -m pipelines.train_torch --loader cassandra --dataset $DATASET --decode torch --workers 12 \
    --steps 200 --batch-size 256 --results-dir "$rows" -o concurrency=16
}

stage_workers() {  # our loader fetching in worker processes (ProcessBatchSource), DALI decoding on the GPU
  for decode in none mixed; do
    python3 -m pipelines.decode_bench --loader cassandra --dataset $DATASET --decode $decode --threads 8 \
      --fetch-workers 8 --results "$OUT/decode.jsonl" -o batch_size=128 -o concurrency=16
  done
  python3 -m pipelines.train_torch --loader cassandra --dataset $DATASET --decode dali --dali-threads 8 \
    --fetch-workers 8 --steps 200 --batch-size 256 --results-dir "$OUT/train" -o concurrency=16
}

stage_workerstart() {  # ProcessBatchSource with its workers forked from this process vs from a clean forkserver
  local rows=$OUT/worker-start.jsonl
  for _ in $(seq "${ROUNDS:-2}"); do
    for decode in none mixed; do
      for method in fork forkserver; do
        WORKBENCH_WORKER_START=$method python3 -m pipelines.decode_bench --loader cassandra --dataset $DATASET \
          --decode $decode --threads 8 --fetch-workers 8 --results "$rows" -o batch_size=128 -o concurrency=16
      done
    done
  done
}

stage_secure() {  # the real plugin and our loader against a Cassandra with a login and TLS only
  local password; password=$(python3 -c "import secrets; print(secrets.token_urlsafe(18))")
  ( export WORKBENCH_TLS=1 WORKBENCH_STATE_DIR=/tmp/stack-secure WORKBENCH_CASSANDRA_USERNAME=workbench \
           WORKBENCH_CASSANDRA_PASSWORD=$password
    wb stack up cassandra
    wb ingest --source synthetic:2000 --backend cassandra 2>&1 | tail -2 | tee "$OUT/ingest-secure.txt"
    for decode in none mixed; do
      python3 -m pipelines.decode_bench --loader cassandra-plugin --native --dataset synthetic-classification-2000-s0 \
        --decode $decode --threads 8 --results "$OUT/secure.jsonl" -o batch_size=128 -o io_threads=4
      python3 -m pipelines.decode_bench --loader cassandra --dataset synthetic-classification-2000-s0 \
        --decode $decode --threads 8 --results "$OUT/secure.jsonl" -o batch_size=128 -o concurrency=32
    done
    grep -rl "$password" /tmp/stack-secure "$OUT" 2>/dev/null | sed 's/^/SECRET FOUND IN /' || echo "password in no output"
  )
  # a node without authentication: the plugin gets empty username/password from our loader and must build
  ( export WORKBENCH_STATE_DIR=/tmp/stack-plain WORKBENCH_CASSANDRA_PORT=9242 WORKBENCH_CASSANDRA_STORAGE_PORT=7100 \
           WORKBENCH_CASSANDRA_JMX_PORT=7299
    wb stack up cassandra
    wb ingest --source synthetic:500 --backend cassandra 2>&1 | tail -1
    python3 -m pipelines.decode_bench --loader cassandra-plugin --native --dataset synthetic-classification-500-s0 \
      --decode none --epochs 1 --results "$OUT/plain-plugin.jsonl" -o batch_size=128
  )
}

stage_sweep() {
  WORKBENCH_CASSANDRA_USERNAME=reader WORKBENCH_CASSANDRA_PASSWORD=unused \
    wb bench loaders -l cassandra -l cassandra-plugin --count 5000 --rtt-ms 0 --rtt-ms 5 --rtt-ms 20 \
    --repeats 3 --results-dir "$OUT/loaders"
}

environment
for stage in "$@"; do
  echo "== $stage"
  "stage_$stage"
done
