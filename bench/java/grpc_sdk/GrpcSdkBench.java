// bench/grpc_sdk.py's Java client: Apache's 5.x SDK through a proxy, and Apache's 4.x remoting
// client straight to the broker (the baseline of the proxy's added latency).
//
//   sdk <endpoint> <topic> <group> <messages> <warmup> <size> <threads> <pids>
//       rocketmq-client-java over plain-text gRPC: <warmup> sends untimed, then the phases
//       "send_1" (<messages> sends, one in flight, each timed), "send_k" (<messages> sends from
//       <threads> threads, each send timed) and "receive_ack" (a SimpleConsumer of <group>
//       receives batches of 32 and acks each message, until every message sent is back)
//   remoting <namesrv> <topic> <messages> <warmup> <size> <pids>
//       rocketmq-client 4.9.7's DefaultMQProducer: <warmup> sends untimed, then "send_1"
//
// <pids> is "name=pid,..." (the proxy's and the broker's): each phase reports the CPU ticks
// (utime + stime of /proc/<pid>/stat) each process spent during it. One JSON line on stdout:
//   {"client": "...", "phases": [{"name", "count", "wall_s", "latencies_ms", "cpu_ticks"}]}
// bench/grpc_sdk_figures.py reads it.

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;

public final class GrpcSdkBench {
    static final long RECEIVE_DEADLINE_MS = 300_000;
    static final int RECEIVE_BATCH = 32;

    interface Send { void run() throws Exception; }

    /** The CPU ticks of the named processes, read before and after a phase. */
    static final class Cpu {
        final Map<String, Long> pids = new LinkedHashMap<>();

        Cpu(String spec) {
            for (String part : spec.split(",")) {
                if (part.isEmpty()) continue;
                String[] kv = part.split("=", 2);
                pids.put(kv[0], Long.parseLong(kv[1]));
            }
        }

        Map<String, Long> read() {
            Map<String, Long> out = new LinkedHashMap<>();
            pids.forEach((name, pid) -> out.put(name, ticks(pid)));
            return out;
        }

        static long ticks(long pid) {
            try {
                String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
                // after "pid (comm) ": state is field 3, utime 14 and stime 15
                String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
                return Long.parseLong(f[11]) + Long.parseLong(f[12]);
            } catch (Exception e) {
                return -1;
            }
        }
    }

    /** One phase's figures, written as a JSON object. */
    static final class Phase {
        final String name;
        final List<Double> latenciesMs = Collections.synchronizedList(new ArrayList<>());
        final Map<String, Long> before;
        final long t0 = System.nanoTime();
        final Cpu cpu;
        long count;
        double wallS;
        Map<String, Long> after;

        Phase(String name, Cpu cpu) {
            this.name = name;
            this.cpu = cpu;
            this.before = cpu.read();
        }

        Phase end(long n) {
            wallS = (System.nanoTime() - t0) / 1e9;
            after = cpu.read();
            count = n;
            return this;
        }

        String json() {
            StringBuilder b = new StringBuilder("{\"name\": \"").append(name)
                    .append("\", \"count\": ").append(count)
                    .append(", \"wall_s\": ").append(wallS).append(", \"latencies_ms\": [");
            synchronized (latenciesMs) {
                for (int i = 0; i < latenciesMs.size(); i++) {
                    b.append(i == 0 ? "" : ", ")
                            .append(String.format(Locale.ROOT, "%.4f", latenciesMs.get(i)));
                }
            }
            b.append("], \"cpu_ticks\": {");
            int i = 0;
            for (String k : before.keySet()) {
                long d = before.get(k) < 0 || after.get(k) < 0 ? -1 : after.get(k) - before.get(k);
                b.append(i++ == 0 ? "" : ", ").append('"').append(k).append("\": ").append(d);
            }
            return b.append("}}").toString();
        }
    }

    static void timed(Phase phase, Send send) throws Exception {
        long t = System.nanoTime();
        send.run();
        phase.latenciesMs.add((System.nanoTime() - t) / 1e6);
    }

    /** {@code messages} sends split over {@code threads} threads, each send timed. */
    static Phase sendPhase(String name, Cpu cpu, int messages, int threads, Send send)
            throws Exception {
        Phase phase = new Phase(name, cpu);
        AtomicInteger left = new AtomicInteger(messages);
        List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            Thread t = new Thread(() -> {
                try {
                    while (left.getAndDecrement() > 0) timed(phase, send);
                } catch (Throwable e) {
                    errors.add(e);
                }
            }, name + "-" + i);
            t.start();
            workers.add(t);
        }
        for (Thread t : workers) t.join();
        if (!errors.isEmpty()) throw new IllegalStateException("send failed", errors.get(0));
        return phase.end(messages);
    }

    static void print(String client, List<Phase> phases) {
        StringBuilder b = new StringBuilder("{\"client\": \"").append(client)
                .append("\", \"phases\": [");
        for (int i = 0; i < phases.size(); i++) {
            b.append(i == 0 ? "" : ", ").append(phases.get(i).json());
        }
        System.out.println(b.append("]}"));
        System.out.flush();
    }

    static void sdk(String[] a) throws Exception {
        String endpoint = a[1], topic = a[2], group = a[3];
        int messages = Integer.parseInt(a[4]), warmup = Integer.parseInt(a[5]);
        int size = Integer.parseInt(a[6]), threads = Integer.parseInt(a[7]);
        Cpu cpu = new Cpu(a[8]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(endpoint)
                .enableSsl(false).setRequestTimeout(Duration.ofSeconds(10)).build();
        byte[] body = new byte[size];
        List<Phase> phases = new ArrayList<>();
        try (Producer p = provider.newProducerBuilder().setClientConfiguration(config)
                .setTopics(topic).build()) {
            Send send = () -> {
                Message m = provider.newMessageBuilder().setTopic(topic).setTag("B").setBody(body)
                        .build();
                p.send(m);
            };
            for (int i = 0; i < warmup; i++) send.run();
            phases.add(sendPhase("send_1", cpu, messages, 1, send));
            phases.add(sendPhase("send_k", cpu, messages, threads, send));
        }
        long want = warmup + 2L * messages;
        try (SimpleConsumer c = provider.newSimpleConsumerBuilder().setClientConfiguration(config)
                .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(2))
                .setSubscriptionExpressions(
                        Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                .build()) {
            Phase phase = new Phase("receive_ack", cpu);
            long got = 0, end = System.currentTimeMillis() + RECEIVE_DEADLINE_MS;
            while (got < want && System.currentTimeMillis() < end) {
                List<MessageView> batch;
                try {
                    batch = c.receive(RECEIVE_BATCH, Duration.ofSeconds(30));
                } catch (Exception e) {  // MESSAGE_NOT_FOUND surfaces as an exception
                    continue;
                }
                for (MessageView v : batch) c.ack(v);
                got += batch.size();
            }
            phases.add(phase.end(got));
        }
        print("java-sdk", phases);
    }

    static void remoting(String[] a) throws Exception {
        String namesrv = a[1], topic = a[2];
        int messages = Integer.parseInt(a[3]), warmup = Integer.parseInt(a[4]);
        int size = Integer.parseInt(a[5]);
        Cpu cpu = new Cpu(a[6]);
        DefaultMQProducer p = new DefaultMQProducer("GrpcSdkBenchDirect");
        p.setNamesrvAddr(namesrv);
        p.setInstanceName("grpc-sdk-bench-" + ProcessHandle.current().pid());
        p.setSendMsgTimeout(10_000);
        p.start();
        byte[] body = new byte[size];
        try {
            Send send = () -> {
                SendResult r = p.send(new org.apache.rocketmq.common.message.Message(
                        topic, "B", body));
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    throw new IllegalStateException("" + r);
                }
            };
            for (int i = 0; i < warmup; i++) send.run();
            print("java-remoting", List.of(sendPhase("send_1", cpu, messages, 1, send)));
        } finally {
            p.shutdown();
        }
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "sdk" -> sdk(args);
            case "remoting" -> remoting(args);
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
        System.exit(0);  // the SDKs' non-daemon threads
    }
}
