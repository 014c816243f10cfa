// bench/vs_java.py's Java client: the same program drives Apache's broker, ours and NATS.
//
//   probe <namesrv> <topic> <periodMs>
//       one sync send every periodMs (1 KiB); a line per send: "P <startEpochMs> <rtUs> <ok>",
//       and "M <addr>" whenever the master it publishes to changes (the route is polled every
//       100 ms, so a failed-over master is found by the broker's recovery, not the client's poll)
//   rocketmq-batch <namesrv> <topic> <threads> <batch> <size>
//       each thread sends a batch of <batch> messages of <size> bytes (DefaultMQProducer.send of a
//       collection: one SEND_BATCH_MESSAGE) and waits for its answer, again and again
//   nats-batch <url> <subject> <threads> <batch> <size>
//       each thread publishes <batch> messages to JetStream asynchronously, then waits for their
//       <batch> acks; the stream (R1, file storage) is created first
//
//   spin
//       the CPU time of a fixed integer loop (ns per iteration, best of 5): the JVM's floor on
//       this machine, beside the same for Python (bench/vs_machine.py)
//
// The batch modes print a line every 10 s:
//   "BATCH msgs/s: N batches/s: N avg_ms: F p99_ms: F max_ms: F failed: N"
// where the RTs are a whole batch's (send to answer, or first publish to last ack), that window's.

import io.nats.client.Connection;
import io.nats.client.JetStream;
import io.nats.client.JetStreamManagement;
import io.nats.client.Nats;
import io.nats.client.api.PublishAck;
import io.nats.client.api.StorageType;
import io.nats.client.api.StreamConfiguration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public final class BenchClient {
    private static final long REPORT_MS = 10_000;

    /** One window's batch latencies: 10 us buckets up to 2 s, the rest counted as 2 s. */
    static final class Window {
        final long[] buckets = new long[200_000];
        long count, failed, sumUs, maxUs;

        synchronized void record(long us, boolean ok) {
            if (!ok) { failed++; return; }
            count++;
            sumUs += us;
            maxUs = Math.max(maxUs, us);
            buckets[(int) Math.min(buckets.length - 1, us / 10)]++;
        }

        synchronized long percentileUs(double q) {
            long rank = (long) Math.ceil(q * count), seen = 0;
            for (int i = 0; i < buckets.length; i++) {
                seen += buckets[i];
                if (seen >= rank && seen > 0) return (i + 1) * 10L;
            }
            return 0;
        }
    }

    interface Batch { void run() throws Exception; }

    static DefaultMQProducer producer(String namesrv, String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(group + "-" + ProcessHandle.current().pid());
        p.setPollNameServerInterval(100);
        p.setSendMsgTimeout(3000);
        p.setMaxMessageSize(4 * 1024 * 1024);
        p.start();
        return p;
    }

    static void probe(String namesrv, String topic, long periodMs) throws Exception {
        DefaultMQProducer p = producer(namesrv, "bench_probe");
        p.setSendMsgTimeout(1000);
        p.setRetryTimesWhenSendFailed(0);
        byte[] body = new byte[1024];
        String master = null;
        long next = System.currentTimeMillis();
        while (true) {
            long start = System.currentTimeMillis(), t0 = System.nanoTime();
            boolean ok;
            String addr = null;
            try {
                SendResult r = p.send(new Message(topic, body));
                ok = r.getSendStatus() == SendStatus.SEND_OK;
                addr = p.getDefaultMQProducerImpl().getmQClientFactory()
                        .findBrokerAddressInPublish(r.getMessageQueue().getBrokerName());
            } catch (Exception e) {
                ok = false;
            }
            long rtUs = (System.nanoTime() - t0) / 1000;
            StringBuilder out = new StringBuilder();
            if (addr != null && !addr.equals(master)) {
                master = addr;
                out.append("M ").append(addr).append('\n');
            }
            out.append("P ").append(start).append(' ').append(rtUs).append(' ').append(ok ? 1 : 0);
            System.out.println(out);
            next += periodMs;
            long wait = next - System.currentTimeMillis();
            if (wait > 0) Thread.sleep(wait); else next = System.currentTimeMillis();
        }
    }

    static void drive(int threads, int batch, Batch send) throws Exception {
        AtomicReference<Window> current = new AtomicReference<>(new Window());
        for (int i = 0; i < threads; i++) {
            Thread t = new Thread(() -> {
                while (true) {
                    long t0 = System.nanoTime();
                    boolean ok = true;
                    try { send.run(); } catch (Exception e) { ok = false; }
                    current.get().record((System.nanoTime() - t0) / 1000, ok);
                }
            }, "batch-" + i);
            t.setDaemon(true);
            t.start();
        }
        while (true) {
            Thread.sleep(REPORT_MS);
            Window w = current.getAndSet(new Window());
            Thread.sleep(5);  // a send that read the old window records into it
            double secs = REPORT_MS / 1000.0;
            System.out.printf("BATCH msgs/s: %d batches/s: %d avg_ms: %.3f p99_ms: %.3f"
                    + " max_ms: %.3f failed: %d%n",
                    Math.round(w.count * batch / secs), Math.round(w.count / secs),
                    w.count == 0 ? 0.0 : w.sumUs / 1000.0 / w.count,
                    w.percentileUs(0.99) / 1000.0, w.maxUs / 1000.0, w.failed);
        }
    }

    static void rocketmqBatch(String namesrv, String topic, int threads, int batch, int size)
            throws Exception {
        DefaultMQProducer p = producer(namesrv, "bench_batch");
        byte[] body = new byte[size];
        drive(threads, batch, () -> {
            List<Message> msgs = new ArrayList<>(batch);
            for (int i = 0; i < batch; i++) msgs.add(new Message(topic, body));
            SendResult r = p.send(msgs);
            if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("" + r);
        });
    }

    static void natsBatch(String url, String subject, int threads, int batch, int size)
            throws Exception {
        Connection nc = Nats.connect(url);
        JetStreamManagement jsm = nc.jetStreamManagement();
        jsm.addStream(StreamConfiguration.builder().name("BENCH").subjects(subject)
                .storageType(StorageType.File).replicas(1).build());
        JetStream js = nc.jetStream();
        byte[] body = new byte[size];
        drive(threads, batch, () -> {
            List<CompletableFuture<PublishAck>> acks = new ArrayList<>(batch);
            for (int i = 0; i < batch; i++) acks.add(js.publishAsync(subject, body));
            for (CompletableFuture<PublishAck> a : acks) a.get();
        });
    }

    static void spin() {
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory
                .getThreadMXBean();
        long best = Long.MAX_VALUE, x = 0, n = 100_000_000;
        for (int round = 0; round < 5; round++) {
            long t = mx.getCurrentThreadCpuTime();
            for (long i = 0; i < n; i++) x += i ^ (x >>> 3);
            best = Math.min(best, mx.getCurrentThreadCpuTime() - t);
        }
        System.out.printf("{\"java_loop_ns_per_iter\": %.3f, \"sink\": %d}%n",
                (double) best / n, x & 1);
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "spin" -> spin();
            case "probe" -> probe(args[1], args[2], Long.parseLong(args[3]));
            case "rocketmq-batch" -> rocketmqBatch(args[1], args[2], Integer.parseInt(args[3]),
                    Integer.parseInt(args[4]), Integer.parseInt(args[5]));
            case "nats-batch" -> natsBatch(args[1], args[2], Integer.parseInt(args[3]),
                    Integer.parseInt(args[4]), Integer.parseInt(args[5]));
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }
}
