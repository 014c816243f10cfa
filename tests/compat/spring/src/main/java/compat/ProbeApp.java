package compat;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.spring.annotation.RocketMQMessageListener;
import org.apache.rocketmq.spring.annotation.RocketMQTransactionListener;
import org.apache.rocketmq.spring.core.RocketMQListener;
import org.apache.rocketmq.spring.core.RocketMQLocalTransactionListener;
import org.apache.rocketmq.spring.core.RocketMQLocalTransactionState;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.RocketMQHeaders;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.CommandLineRunner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.ApplicationContext;
import org.springframework.messaging.Message;
import org.springframework.messaging.support.MessageBuilder;
import org.springframework.stereotype.Component;

/**
 * A day-one Spring Boot service on rocketmq-spring-boot-starter: RocketMQTemplate syncSend,
 * asyncSend and sendMessageInTransaction (with a local-transaction listener), and a
 * {@code @RocketMQMessageListener} that receives them. Prints one JSON line per observation and
 * exits (status 1 when it could not finish). Arguments: --rocketmq.name-server=HOST:PORT
 * --probe.topic=T --probe.prefix=P (the topic exists already, created by the test).
 */
@SpringBootApplication
public class ProbeApp implements CommandLineRunner {
    static final int SYNC = 6;
    static final int ASYNC = 4;
    /** transactional: 0 commit, 1 rollback, 2 unknown then committed on check-back */
    static final int TX = 3;
    static final long WAIT_MS = 40_000;

    static final Set<String> RECEIVED = ConcurrentHashMap.newKeySet();

    final RocketMQTemplate template;
    final ApplicationContext context;

    @Value("${probe.topic}")
    String topic;

    ProbeApp(RocketMQTemplate template, ApplicationContext context) {
        this.template = template;
        this.context = context;
    }

    public static void main(String[] args) {
        SpringApplication.run(ProbeApp.class, args);
    }

    @Override
    public void run(String... args) throws Exception {
        int status = 0;
        try {
            scenarios();
        } catch (Exception e) {
            emit(Map.of("event", "failed", "error", String.valueOf(e)));
            status = 1;
        }
        int code = status;
        System.exit(SpringApplication.exit(context, () -> code));
    }

    void scenarios() throws Exception {
        for (int idx = 0; idx < SYNC; idx++) {
            Message<String> msg = message(idx);
            SendResult r = template.syncSend(topic + ":TagS", msg);
            emit(sent(idx, "sync", "TagS", r));
        }
        CountDownLatch async = new CountDownLatch(ASYNC);
        List<Throwable> asyncErrors = new ArrayList<>();
        for (int idx = SYNC; idx < SYNC + ASYNC; idx++) {
            int i = idx;
            template.asyncSend(topic + ":TagA", message(idx), new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    emit(sent(i, "async", "TagA", r));
                    async.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    synchronized (asyncErrors) {
                        asyncErrors.add(e);
                    }
                    async.countDown();
                }
            });
        }
        if (!async.await(WAIT_MS, TimeUnit.MILLISECONDS)) throw new IllegalStateException("async callbacks");
        if (!asyncErrors.isEmpty()) throw new IllegalStateException("async send", asyncErrors.get(0));
        int base = SYNC + ASYNC;
        for (int t = 0; t < TX; t++) {
            int idx = base + t;
            TransactionSendResult r = template.sendMessageInTransaction(topic + ":TagT", message(idx), t);
            Map<String, Object> m = sent(idx, "tx", "TagT", r);
            m.put("local_state", String.valueOf(r.getLocalTransactionState()));
            emit(m);
        }
        // every committed message reaches the listener: syncs, asyncs, tx 0 and tx 2
        int want = SYNC + ASYNC + 2;
        long end = System.currentTimeMillis() + WAIT_MS;
        while (RECEIVED.size() < want) {
            if (System.currentTimeMillis() > end) {
                throw new IllegalStateException("listener got " + RECEIVED.size() + " of " + want);
            }
            Thread.sleep(20); // polling a condition with a deadline
        }
        emit(Map.of("event", "done"));
    }

    static Message<String> message(int idx) {
        return MessageBuilder.withPayload(body(idx))
                .setHeader(RocketMQHeaders.KEYS, "k" + idx)
                .setHeader("idx", String.valueOf(idx))
                .setHeader("color", idx % 2 == 0 ? "red" : "blue")
                .build();
    }

    static String body(int idx) {
        return "spring-" + idx + "-\u00e9\u4e2d";
    }

    Map<String, Object> sent(int idx, String mode, String tag, SendResult r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("event", "sent");
        m.put("idx", idx);
        m.put("mode", mode);
        m.put("topic", topic);
        m.put("tags", tag);
        m.put("keys", "k" + idx);
        byte[] b = body(idx).getBytes(StandardCharsets.UTF_8);
        m.put("body_sha", sha(b));
        m.put("body_len", b.length);
        m.put("status", String.valueOf(r.getSendStatus()));
        m.put("msg_id", r.getMsgId());
        m.put("offset_msg_id", r.getOffsetMsgId());
        m.put("queue_id", r.getMessageQueue().getQueueId());
        m.put("broker", r.getMessageQueue().getBrokerName());
        m.put("queue_offset", r.getQueueOffset());
        return m;
    }

    /** The local transaction: the arg says what to answer; a check-back commits. */
    @RocketMQTransactionListener
    static class LocalTx implements RocketMQLocalTransactionListener {
        @Override
        public RocketMQLocalTransactionState executeLocalTransaction(Message msg, Object arg) {
            int t = (Integer) arg;
            RocketMQLocalTransactionState s = t == 0 ? RocketMQLocalTransactionState.COMMIT
                    : t == 1 ? RocketMQLocalTransactionState.ROLLBACK : RocketMQLocalTransactionState.UNKNOWN;
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("event", "local");
            m.put("idx", Integer.parseInt(String.valueOf(msg.getHeaders().get("idx"))));
            m.put("transaction_id", String.valueOf(msg.getHeaders().get(RocketMQHeaders.PREFIX + RocketMQHeaders.TRANSACTION_ID)));
            m.put("answer", String.valueOf(s));
            m.put("headers", headers(msg));
            emit(m);
            return s;
        }

        @Override
        public RocketMQLocalTransactionState checkLocalTransaction(Message msg) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("event", "check");
            m.put("idx", Integer.parseInt(String.valueOf(msg.getHeaders().get("idx"))));
            m.put("transaction_id", String.valueOf(msg.getHeaders().get(RocketMQHeaders.PREFIX + RocketMQHeaders.TRANSACTION_ID)));
            m.put("body", new String((byte[]) msg.getPayload(), StandardCharsets.UTF_8));
            m.put("headers", headers(msg));
            emit(m);
            return RocketMQLocalTransactionState.COMMIT;
        }
    }

    @Component
    @RocketMQMessageListener(topic = "${probe.topic}", consumerGroup = "${probe.prefix}-cg",
            selectorExpression = "TagS || TagA || TagT")
    static class Listener implements RocketMQListener<MessageExt> {
        @Override
        public void onMessage(MessageExt m) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("event", "recv");
            r.put("topic", m.getTopic());
            r.put("tags", m.getTags());
            r.put("keys", m.getKeys());
            r.put("msg_id", m.getMsgId());
            r.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
            r.put("body_sha", sha(m.getBody()));
            r.put("body_len", m.getBody().length);
            r.put("props", new TreeMap<>(m.getProperties()));
            r.put("broker", m.getBrokerName());
            r.put("queue_id", m.getQueueId());
            r.put("queue_offset", m.getQueueOffset());
            r.put("reconsume_times", m.getReconsumeTimes());
            emit(r);
            RECEIVED.add(m.getMsgId());
        }
    }

    // ------------------------------------------------------------------ output

    static Map<String, Object> headers(Message<?> msg) {
        Map<String, Object> h = new TreeMap<>();
        msg.getHeaders().forEach((k, v) -> h.put(k, String.valueOf(v)));
        return h;
    }

    static String sha(byte[] b) {
        try {
            StringBuilder s = new StringBuilder();
            for (byte x : MessageDigest.getInstance("SHA-256").digest(b)) s.append(String.format("%02x", x));
            return s.toString();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    static synchronized void emit(Map<String, Object> m) {
        StringBuilder s = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<String, Object> e : m.entrySet()) {
            if (!first) s.append(',');
            first = false;
            s.append(quote(e.getKey())).append(':').append(value(e.getValue()));
        }
        System.out.println(s.append('}'));
    }

    static String value(Object v) {
        if (v == null) return "null";
        if (v instanceof Number || v instanceof Boolean) return v.toString();
        if (v instanceof Map<?, ?> map) {
            StringBuilder s = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<?, ?> e : map.entrySet()) {
                if (!first) s.append(',');
                first = false;
                s.append(quote(String.valueOf(e.getKey()))).append(':').append(value(e.getValue()));
            }
            return s.append('}').toString();
        }
        return quote(String.valueOf(v));
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
