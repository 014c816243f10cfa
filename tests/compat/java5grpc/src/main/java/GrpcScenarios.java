import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * Apache's unmodified RocketMQ 5.x Java SDK (rocketmq-client-java, gRPC) against mqproxy. One JSON
 * line per observation; tests/compat/test_java_grpc_client.py asserts on them.
 *
 * Usage: java -cp ... GrpcScenarios ENDPOINT PREFIX SCENARIO...
 * The scenarios given run at once (each on topics and groups of its own), "stream" after them.
 *   produce:     normal (tag, keys, property), FIFO (two message groups), delay (+2 s)
 *   transaction: commit, rollback, two left to the broker's check (answered commit / rollback);
 *                then a SimpleConsumer reads what the topic holds
 *   simple:      receive; ack one, change one's invisible duration, leave one to its invisible
 *                time: both come back with delivery attempt 2
 *   push:        three push consumers on a two-queue topic, every message consumed
 *   fifopush:    two push consumers of an orderly group (the test made it so) on a FIFO topic;
 *                fifo.groups message groups of fifo.per.group messages each ("g<k>:<seq>"),
 *                sent at once (one thread per group): when each consumption began and ended,
 *                and whether another was under way in the same message group meanwhile
 *   stream:      a producer sends numbered messages (one per stream.gap.ms) until the file
 *                stream.stop exists, while a SimpleConsumer and a PushConsumer (two groups) each
 *                receive and ack them: the test kills a master meanwhile. Then both go on until
 *                each has every acknowledged send, or stream.drain.ms passed ("drained")
 * Topics (the test creates them): PREFIX + Normal, Fifo, Delay, Tx, Simple, Push, FifoPush,
 * Stream; the group PREFIX + FifoPushG orderly.
 */
public final class GrpcScenarios {
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    static final long DEADLINE_MS = Long.getLong("deadline.ms", 45000);
    static ClientConfiguration config;
    static String prefix;

    public static void main(String[] args) throws Exception {
        // TLS on, the SDK's default: it accepts any server certificate (its channel trusts
        // through an insecure trust manager), so the cluster's self-signed one needs no setup;
        // -Dtls=false for a plain-text proxy
        config = ClientConfiguration.newBuilder().setEndpoints(args[0])
            .enableSsl(Boolean.parseBoolean(System.getProperty("tls", "true")))
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        prefix = args[1];
        // the scenarios use topics and groups of their own: they run at once, "stream" (a
        // master is killed during it) alone after them
        List<Thread> threads = new ArrayList<>();
        AtomicInteger failures = new AtomicInteger();
        for (int i = 2; i < args.length; i++) {
            String sc = args[i];
            if (!sc.equals("stream")) {
                Thread t = new Thread(() -> run(sc, failures), sc);
                t.start();
                threads.add(t);
            }
        }
        for (Thread t : threads) {
            t.join();
        }
        if (List.of(args).subList(2, args.length).contains("stream")) {
            run("stream", failures);
        }
        System.out.flush();
        System.exit(failures.get() == 0 ? 0 : 1);
    }

    static void run(String sc, AtomicInteger failures) {
        long start = System.currentTimeMillis();
        try {
            switch (sc) {
                case "produce": produce(sc); break;
                case "transaction": transaction(sc); break;
                case "simple": simple(sc); break;
                case "push": push(sc); break;
                case "fifopush": fifoPush(sc); break;
                case "stream": stream(sc); break;
                default: throw new IllegalArgumentException("unknown scenario " + sc);
            }
            emit(sc, "done", "ms", System.currentTimeMillis() - start);
        } catch (Throwable t) {
            failures.incrementAndGet();
            emit(sc, "failed", "error", String.valueOf(t));
            t.printStackTrace();
        }
    }

    // ------------------------------------------------------------------ scenarios

    static void produce(String sc) throws Exception {
        String normal = prefix + "Normal", fifo = prefix + "Fifo", delay = prefix + "Delay";
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config)
                .setTopics(normal, fifo, delay).build()) {
            for (int i = 0; i < 3; i++) {
                Message m = PROVIDER.newMessageBuilder().setTopic(normal).setTag("N")
                    .setKeys("k" + i).addProperty("idx", String.valueOf(i))
                    .setBody(("normal " + i).getBytes(StandardCharsets.UTF_8)).build();
                SendReceipt r = p.send(m);
                emit(sc, "sent", "kind", "normal", "idx", i, "message_id", r.getMessageId().toString());
            }
            for (int i = 0; i < 4; i++) {
                String group = "group-" + (i % 2);
                Message m = PROVIDER.newMessageBuilder().setTopic(fifo).setTag("F")
                    .setMessageGroup(group).setBody(("fifo " + i).getBytes(StandardCharsets.UTF_8)).build();
                SendReceipt r = p.send(m);
                emit(sc, "sent", "kind", "fifo", "idx", i, "group", group,
                    "message_id", r.getMessageId().toString());
            }
            long due = System.currentTimeMillis() + 2000;
            Message m = PROVIDER.newMessageBuilder().setTopic(delay).setTag("D")
                .setDeliveryTimestamp(due).setBody("delayed".getBytes(StandardCharsets.UTF_8)).build();
            SendReceipt r = p.send(m);
            emit(sc, "sent", "kind", "delay", "idx", 0, "deliver_ms", due,
                "message_id", r.getMessageId().toString());
        }
    }

    static void transaction(String sc) throws Exception {
        String topic = prefix + "Tx";
        Set<String> checked = ConcurrentHashMap.newKeySet();
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics(topic)
                .setTransactionChecker(view -> {
                    String body = body(view);
                    emit(sc, "checked", "body", body, "message_id", view.getMessageId().toString(),
                        "topic", view.getTopic());
                    checked.add(body);
                    // "commit" too: the producer's own commit may still be on its way when a
                    // loaded broker checks (its transactionTimeOut is 1 s here)
                    return body.endsWith("commit") ? TransactionResolution.COMMIT
                        : TransactionResolution.ROLLBACK;
                }).build()) {
            String[][] plan = {{"commit", "commit"}, {"rollback", "rollback"},
                {"check-commit", ""}, {"check-rollback", ""}};
            for (String[] step : plan) {
                Transaction tx = p.beginTransaction();
                Message m = PROVIDER.newMessageBuilder().setTopic(topic).setTag("TX")
                    .setBody(step[0].getBytes(StandardCharsets.UTF_8)).build();
                SendReceipt r = p.send(m, tx);
                emit(sc, "sent", "body", step[0], "message_id", r.getMessageId().toString());
                if (step[1].equals("commit")) {
                    tx.commit();
                } else if (step[1].equals("rollback")) {
                    tx.rollback();
                }
            }
            await(() -> checked.containsAll(List.of("check-commit", "check-rollback")));
            // what consumers see: the two committed messages, never the rolled back ones
            List<String> seen = receiveAll(topic, prefix + "TxReader", 2);
            emit(sc, "visible", "bodies", String.join(",", seen));
        }
    }

    static void simple(String sc) throws Exception {
        String topic = prefix + "Simple";
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics(topic).build()) {
            for (String body : new String[] {"keep", "change", "expire"}) {
                p.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag("S")
                    .setBody(body.getBytes(StandardCharsets.UTF_8)).build());
            }
        }
        try (SimpleConsumer c = simpleConsumer(topic, prefix + "SimpleG")) {
            Set<String> done = new HashSet<>();
            long end = System.currentTimeMillis() + DEADLINE_MS;
            while (done.size() < 3 && System.currentTimeMillis() < end) {
                List<MessageView> got = receive(c, Duration.ofSeconds(3));
                for (MessageView v : got) {
                    String body = body(v);
                    emit(sc, "received", "body", body, "attempt", v.getDeliveryAttempt(),
                        "message_id", v.getMessageId().toString());
                    if (v.getDeliveryAttempt() > 1 || body.equals("keep")) {
                        c.ack(v);
                        done.add(body);
                        emit(sc, "acked", "body", body, "attempt", v.getDeliveryAttempt());
                    } else if (body.equals("change")) {
                        c.changeInvisibleDuration(v, Duration.ofSeconds(1));
                        emit(sc, "changed", "body", body);
                    }  // "expire": left to its invisible time (3 s)
                }
            }
        }
    }

    static void push(String sc) throws Exception {
        String topic = prefix + "Push";
        Map<String, String> consumedBy = new ConcurrentHashMap<>();
        List<PushConsumer> consumers = new ArrayList<>();
        try {
            for (int i = 0; i < 3; i++) {
                String who = "c" + i;
                consumers.add(PROVIDER.newPushConsumerBuilder().setClientConfiguration(config)
                    .setConsumerGroup(prefix + "PushG")
                    .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                    .setMessageListener(view -> {
                        String body = body(view);
                        consumedBy.put(body, who);
                        emit(sc, "consumed", "who", who, "body", body, "attempt", view.getDeliveryAttempt());
                        return ConsumeResult.SUCCESS;
                    }).build());
            }
            try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics(topic).build()) {
                for (int i = 0; i < 12; i++) {
                    p.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag("P")
                        .setBody(("push " + i).getBytes(StandardCharsets.UTF_8)).build());
                    emit(sc, "sent", "body", "push " + i);
                }
            }
            await(() -> consumedBy.size() >= 12);
        } finally {
            for (PushConsumer c : consumers) {
                c.close();
            }
        }
    }

    static void fifoPush(String sc) throws Exception {
        String topic = prefix + "FifoPush";
        int groups = Integer.getInteger("fifo.groups", 6);
        int perGroup = Integer.getInteger("fifo.per.group", 25);
        Set<String> busy = new HashSet<>();  // message groups being consumed (under its lock)
        Set<String> seen = ConcurrentHashMap.newKeySet();
        List<PushConsumer> consumers = new ArrayList<>();
        try {
            for (int i = 0; i < 2; i++) {
                String who = "c" + i;
                consumers.add(PROVIDER.newPushConsumerBuilder().setClientConfiguration(config)
                    .setConsumerGroup(prefix + "FifoPushG")
                    .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                    .setMessageListener(view -> {
                        String body = body(view);
                        String group = body.substring(0, body.indexOf(':'));
                        boolean overlap;
                        synchronized (busy) {
                            overlap = !busy.add(group);
                        }
                        long start = System.nanoTime() / 1000;
                        work();
                        long end = System.nanoTime() / 1000;
                        synchronized (busy) {
                            busy.remove(group);
                        }
                        seen.add(body);
                        emit(sc, "consumed", "who", who, "group", group,
                            "seq", Integer.parseInt(body.substring(group.length() + 1)),
                            "message_group", view.getMessageGroup().orElse(""),
                            "attempt", view.getDeliveryAttempt(), "start_us", start, "end_us", end,
                            "overlap", overlap);
                        return ConsumeResult.SUCCESS;
                    }).build());
            }
            try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics(topic).build()) {
                List<Thread> senders = new ArrayList<>();
                AtomicInteger sendFailures = new AtomicInteger();
                for (int k = 0; k < groups; k++) {
                    String group = "g" + k;
                    Thread t = new Thread(() -> {
                        try {  // one message group's sends one after the other
                            for (int seq = 0; seq < perGroup; seq++) {
                                p.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag("F")
                                    .setMessageGroup(group)
                                    .setBody((group + ":" + seq).getBytes(StandardCharsets.UTF_8)).build());
                            }
                        } catch (Exception e) {
                            sendFailures.incrementAndGet();
                            emit(sc, "send_failed", "group", group, "error", trim(e));
                        }
                    }, "send-" + group);
                    t.start();
                    senders.add(t);
                }
                for (Thread t : senders) {
                    t.join();
                }
                if (sendFailures.get() > 0) {
                    throw new IllegalStateException(sendFailures.get() + " message groups not sent");
                }
                emit(sc, "sent", "groups", groups, "per_group", perGroup);
            }
            await(() -> seen.size() >= groups * perGroup);
        } finally {
            for (PushConsumer c : consumers) {
                c.close();
            }
        }
    }

    /** A listener's bit of work (3 ms): two consumptions of one message group at once overlap. */
    static void work() {
        try {
            Thread.sleep(3);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void stream(String sc) throws Exception {
        String topic = prefix + "Stream";
        Path stop = Path.of(System.getProperty("stream.stop"));
        long gapMs = Long.getLong("stream.gap.ms", 50);
        long streamEnd = System.currentTimeMillis() + Long.getLong("stream.max.ms", 180000);
        Set<String> acked = ConcurrentHashMap.newKeySet();
        ConcurrentMap<String, Set<String>> got = new ConcurrentHashMap<>();
        got.put("simple", ConcurrentHashMap.newKeySet());
        got.put("push", ConcurrentHashMap.newKeySet());
        AtomicInteger phase = new AtomicInteger();  // 0 streaming, 1 draining, 2 over
        PushConsumer push = PROVIDER.newPushConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(prefix + "StreamPush")
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setMessageListener(view -> {
                String body = body(view);
                got.get("push").add(body);
                emit(sc, "received", "via", "push", "body", body, "attempt", view.getDeliveryAttempt(),
                    "t", now());
                return ConsumeResult.SUCCESS;
            }).build();
        SimpleConsumer simple = simpleConsumer(topic, prefix + "StreamSimple");
        Thread reader = new Thread(() -> streamReceive(sc, simple, got.get("simple"), acked, phase));
        reader.setDaemon(true);
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config).setTopics(topic).build()) {
            emit(sc, "started");
            reader.start();
            for (int i = 0; !Files.exists(stop); i++) {
                if (System.currentTimeMillis() > streamEnd) {
                    throw new IllegalStateException("stream: no stop file in time");
                }
                String body = "stream " + i;
                try {
                    SendReceipt r = p.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag("S")
                        .setBody(body.getBytes(StandardCharsets.UTF_8)).build());
                    acked.add(body);
                    emit(sc, "sent", "body", body, "message_id", r.getMessageId().toString(), "t", now());
                } catch (Exception e) {
                    emit(sc, "send_failed", "body", body, "error", trim(e), "t", now());
                }
                Thread.sleep(gapMs);  // the stream's pace
            }
            phase.set(1);
            long end = System.currentTimeMillis() + Long.getLong("stream.drain.ms", 60000);
            while (!(got.get("simple").containsAll(acked) && got.get("push").containsAll(acked))
                    && System.currentTimeMillis() < end) {
                Thread.sleep(50);  // the consumers' progress, polled with a deadline
            }
            phase.set(2);
            reader.join(15000);
            emit(sc, "drained", "acked", acked.size(), "missing_simple", missing(acked, got.get("simple")),
                "missing_push", missing(acked, got.get("push")));
        } finally {
            phase.set(2);
            push.close();
            simple.close();
        }
    }

    /** The stream's SimpleConsumer: receive (5 s invisible) and ack until told to stop. */
    static void streamReceive(String sc, SimpleConsumer c, Set<String> got, Set<String> acked,
                              AtomicInteger phase) {
        while (phase.get() == 0 || (phase.get() == 1 && !got.containsAll(acked))) {
            List<MessageView> views;
            try {
                views = c.receive(16, Duration.ofSeconds(5));
            } catch (Exception e) {  // MESSAGE_NOT_FOUND, or the proxy's error while failing over
                emit(sc, "receive_error", "error", trim(e), "t", now());
                continue;
            }
            for (MessageView v : views) {
                String body = body(v);
                got.add(body);
                emit(sc, "received", "via", "simple", "body", body, "attempt", v.getDeliveryAttempt(),
                    "t", now());
                try {
                    c.ack(v);
                } catch (Exception e) {  // acked on a master that went: delivered again later
                    emit(sc, "ack_failed", "body", body, "error", trim(e), "t", now());
                }
            }
        }
    }

    static int missing(Set<String> want, Set<String> got) {
        Set<String> left = new HashSet<>(want);
        left.removeAll(got);
        return left.size();
    }

    static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    static String trim(Exception e) {
        String s = String.valueOf(e);
        return s.length() > 200 ? s.substring(0, 200) : s;
    }

    // ------------------------------------------------------------------ helpers

    static SimpleConsumer simpleConsumer(String topic, String group) throws Exception {
        return PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config).setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .build();
    }

    static List<MessageView> receive(SimpleConsumer c, Duration invisible) {
        try {
            return c.receive(16, invisible);
        } catch (Exception e) {  // MESSAGE_NOT_FOUND surfaces as an exception
            return Collections.emptyList();
        }
    }

    /** Receive and ack until {@code want} messages came (or the deadline); their bodies, sorted. */
    static List<String> receiveAll(String topic, String group, int want) throws Exception {
        List<String> out = new ArrayList<>();
        try (SimpleConsumer c = simpleConsumer(topic, group)) {
            long end = System.currentTimeMillis() + DEADLINE_MS;
            while (out.size() < want && System.currentTimeMillis() < end) {
                for (MessageView v : receive(c, Duration.ofSeconds(15))) {
                    out.add(body(v));
                    c.ack(v);
                }
            }
        }
        Collections.sort(out);
        return out;
    }

    static String body(MessageView v) {
        ByteBuffer b = v.getBody().duplicate();
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    static void await(BooleanSupplier cond) throws InterruptedException {
        long end = System.currentTimeMillis() + DEADLINE_MS;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > end) {
                throw new IllegalStateException("condition not met within " + DEADLINE_MS + " ms");
            }
            Thread.sleep(50);
        }
    }

    // ------------------------------------------------------------------ output

    static synchronized void emit(String scenario, String event, Object... kv) {
        StringBuilder sb = new StringBuilder("{\"scenario\":").append(q(scenario))
            .append(",\"event\":").append(q(event));
        for (int i = 0; i + 1 < kv.length; i += 2) {
            sb.append(',').append(q(String.valueOf(kv[i]))).append(':');
            Object v = kv[i + 1];
            sb.append(v instanceof Number || v instanceof Boolean ? String.valueOf(v) : q(String.valueOf(v)));
        }
        System.out.println(sb.append('}'));
    }

    static String q(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
