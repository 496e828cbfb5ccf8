package workbench.ceilings;

import java.io.FileInputStream;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import javax.cache.Cache;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import org.apache.ignite.Ignition;
import org.apache.ignite.binary.BinaryObject;
import org.apache.ignite.cache.query.QueryCursor;
import org.apache.ignite.cache.query.ScanQuery;
import org.apache.ignite.client.ClientCache;
import org.apache.ignite.client.IgniteClient;
import org.apache.ignite.client.SslMode;
import org.apache.ignite.configuration.ClientConfiguration;

/**
 * What the Ignite thin client for Java reads from one split of a workbench dataset: the ids from the
 * {@code <CACHE>_IDS} cache (id -> split), then {@code getAll} batches of binary objects with N threads,
 * one client each, counting the bytes of each object's {@code data} field. The login comes from
 * CEILING_USERNAME / CEILING_PASSWORD (never argv); it prints one JSON line.
 */
public final class IgniteCeiling {
    private IgniteCeiling() {
    }

    static void fail(String message) {
        System.err.println(message.replaceAll("\\s+", " ").trim());
        System.exit(1);
    }

    static String firstLine(Throwable t) {
        while (t instanceof java.util.concurrent.ExecutionException && t.getCause() != null) {
            t = t.getCause();
        }
        Throwable root = t;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        String outer = String.valueOf(t.getMessage()).split("\n")[0];
        String inner = String.valueOf(root.getMessage()).split("\n")[0];
        return t.getClass().getSimpleName() + ": " + outer + (root == t ? "" : " (" + root.getClass().getSimpleName()
            + ": " + inner + ")");
    }

    static double cpuSeconds() {
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        return os.getProcessCpuTime() / 1e9;
    }

    static SSLContext sslContext(String caFile) throws Exception {
        KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
        trust.load(null, null);
        try (InputStream in = new FileInputStream(caFile)) {
            int i = 0;
            for (Certificate cert : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                trust.setCertificateEntry("ca" + i++, cert);
            }
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trust);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, tmf.getTrustManagers(), null);
        return ctx;
    }

    /** A plain thin client of one node (no partition awareness, no heartbeats), with the login and TLS if any. */
    static ClientConfiguration clientConfig(String address, int timeoutMs, SSLContext ctx) {
        ClientConfiguration cfg = new ClientConfiguration().setAddresses(address).setTimeout(timeoutMs)
            .setHeartbeatEnabled(false).setPartitionAwarenessEnabled(false);
        String user = System.getenv("CEILING_USERNAME");
        if (user != null && !user.isEmpty()) {
            cfg.setUserName(user).setUserPassword(System.getenv("CEILING_PASSWORD"));
        }
        if (ctx != null) {
            cfg.setSslMode(SslMode.REQUIRED).setSslContextFactory(() -> ctx);
        }
        return cfg;
    }

    /** The split's ids: a scan of the ids cache (a loader lists them in its first epoch and keeps them). */
    static List<String> listIds(IgniteClient client, String cacheName, String split, String where) {
        List<String> keys = new ArrayList<>();
        try {
            ClientCache<String, String> ids = client.cache(cacheName + "_IDS");
            ScanQuery<String, String> scan = new ScanQuery<>();
            scan.setPageSize(5000);
            try (QueryCursor<Cache.Entry<String, String>> cursor = ids.query(scan)) {
                for (Cache.Entry<String, String> e : cursor) {
                    String s = e.getValue() == null ? "train" : e.getValue();
                    if (s.equals(split)) {
                        keys.add(e.getKey());
                    }
                }
            }
        } catch (Exception e) {
            fail("ignite-ceiling: listing the ids of cache " + cacheName + "_IDS at " + where + " failed: "
                + firstLine(e));
        }
        return keys;
    }

    /** One pass over the split's `keys`: every value by getAll, one batch per request, a request in flight per
     * client. Returns {samples, bytes}. With `digests` (the --digest pass; null in every timed one) it also
     * records key -> SHA-256 (hex) of every sample's data. */
    static long[] readOnce(List<IgniteClient> clients, ExecutorService pool, String cacheName, List<String> keys,
                           int batch, String where, Map<String, String> digests) {
        List<List<String>> batches = new ArrayList<>();
        for (int i = 0; i < keys.size(); i += batch) {
            batches.add(keys.subList(i, Math.min(keys.size(), i + batch)));
        }
        AtomicInteger next = new AtomicInteger();
        AtomicLong samples = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        List<Future<?>> running = new ArrayList<>();
        for (IgniteClient client : clients) {
            running.add(pool.submit(() -> {
                ClientCache<String, BinaryObject> cache = client.<String, Object>cache(cacheName).withKeepBinary();
                MessageDigest sha = digests == null ? null : MessageDigest.getInstance("SHA-256");
                for (int i = next.getAndIncrement(); i < batches.size(); i = next.getAndIncrement()) {
                    Map<String, BinaryObject> values = cache.getAll(new HashSet<>(batches.get(i)));
                    for (Map.Entry<String, BinaryObject> entry : values.entrySet()) {
                        byte[] data = entry.getValue().field("data");
                        samples.incrementAndGet();
                        bytes.addAndGet(data == null ? 0 : data.length);
                        if (sha != null) {
                            byte[] sum = sha.digest(data == null ? new byte[0] : data);
                            digests.put(entry.getKey(), HexFormat.of().formatHex(sum));
                        }
                    }
                }
                return null;
            }));
        }
        try {
            for (Future<?> f : running) {
                f.get();
            }
        } catch (Exception e) {
            fail("ignite-ceiling: reading cache " + cacheName + " at " + where + " failed: " + firstLine(e));
        }
        return new long[] {samples.get(), bytes.get()};
    }

    /** `s` as a JSON string (the key of a digest line). */
    static String jsonString(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format(java.util.Locale.ROOT, "\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    /** One "sha256 <hex> <key as a JSON string>" line per sample, in key order. */
    static void printDigests(Map<String, String> digests) {
        StringBuilder out = new StringBuilder();
        for (Map.Entry<String, String> e : new TreeMap<>(digests).entrySet()) {
            out.append("sha256 ").append(e.getValue()).append(' ').append(jsonString(e.getKey())).append('\n');
        }
        System.out.print(out);
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opt = new HashMap<>(Map.of("host", "127.0.0.1", "port", "10800", "split", "train",
            "concurrency", "16", "batch", "64", "timeout", "10", "ca", "", "tls", "false", "cache", "",
            "addresses", ""));
        opt.put("warmup", "0");  // untimed passes before the timed one (Map.of takes at most 10 pairs)
        opt.put("digest", "false");  // true: one more, untimed, pass after the timed one prints every sample's digest
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--") || !opt.containsKey(args[i].substring(2))) {
                fail("ignite-ceiling: unknown option " + args[i] + "; options: " + opt.keySet());
            }
            opt.put(args[i].substring(2), args[i + 1]);
        }
        // --addresses host:port,host:port (every node of a cluster) wins over --host and --port (one node).
        String where = opt.get("addresses").isEmpty() ? opt.get("host") + ":" + opt.get("port") : opt.get("addresses");
        String cacheName = opt.get("cache");
        String split = opt.get("split");
        int threads = Integer.parseInt(opt.get("concurrency"));
        int batch = Integer.parseInt(opt.get("batch"));
        int warmup = Integer.parseInt(opt.get("warmup"));
        boolean digest = Boolean.parseBoolean(opt.get("digest"));
        int timeoutMs = (int) (Double.parseDouble(opt.get("timeout")) * 1000);

        String[] addresses = where.split(",");
        SSLContext ctx = Boolean.parseBoolean(opt.get("tls")) ? sslContext(opt.get("ca")) : null;

        long connectStart = System.nanoTime();
        List<IgniteClient> clients = new ArrayList<>();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            List<Future<IgniteClient>> starting = new ArrayList<>();
            for (int i = 0; i < threads; i++) {
                // thread i talks to node i mod n: the connections spread over every node of a cluster
                ClientConfiguration cfg = clientConfig(addresses[i % addresses.length], timeoutMs, ctx);
                starting.add(pool.submit(() -> Ignition.startClient(cfg)));
            }
            for (Future<IgniteClient> f : starting) {
                clients.add(f.get());
            }
        } catch (Exception e) {
            fail("ignite-ceiling: cannot connect to Ignite at " + where + ": " + firstLine(e));
        }
        double connectSeconds = (System.nanoTime() - connectStart) / 1e9;

        long[] counts = new long[2];
        long start = System.nanoTime();
        double cpuStart = cpuSeconds();
        List<String> keys = listIds(clients.get(0), cacheName, split, where);  // once: timed only with warmup 0
        double listSeconds = (System.nanoTime() - start) / 1e9;
        for (int pass = 0; pass <= warmup; pass++) {  // untimed warm-up passes (JIT, connections), then the timed one
            if (pass == warmup && warmup > 0) {
                start = System.nanoTime();
                cpuStart = cpuSeconds();
            }
            counts = readOnce(clients, pool, cacheName, keys, batch, where, null);
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        double cpu = cpuSeconds() - cpuStart;
        if (digest) {  // after the clock: the timed pass hashed nothing
            Map<String, String> digests = new ConcurrentHashMap<>();
            readOnce(clients, pool, cacheName, keys, batch, where, digests);
            printDigests(digests);
        }
        for (IgniteClient client : clients) {
            client.close();
        }
        pool.shutdown();
        System.out.printf(java.util.Locale.ROOT,
            "{\"program\": \"java/ignite-thin-client\", \"samples\": %d, \"bytes\": %d, \"wire_bytes\": %d, "
            + "\"seconds\": %.6f, \"list_seconds\": %.6f, \"connect_seconds\": %.6f, \"cpu_s\": %.6f, "
            + "\"cpu_total_s\": %.6f, \"concurrency\": %d}%n",
            counts[0], counts[1], counts[1], seconds, listSeconds, connectSeconds, cpu, cpuSeconds(), threads);
        System.out.flush();
        System.exit(0);
    }
}
