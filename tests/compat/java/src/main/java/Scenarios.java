import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario runner for the compat tests: drives Apache's unmodified RocketMQ Java client against a
 * NameServer and prints one JSON line per observation (what the client reported, what consumers
 * received). The Python tests assert on those lines field by field.
 *
 * Usage: java -cp ... Scenarios NAMESRV PREFIX SCENARIO...
 * System properties: ak / sk (sign with AclClientRPCHook), deadline.ms (per wait, default 70000).
 */
public final class Scenarios {
    static String namesrv;
    static String prefix;
    static RPCHook hook;
    static DefaultMQAdminExt admin;
    /** Per wait. Longer than two of the client's 30 s heartbeat periods: a 5.x push consumer bumps
     * its subscriptions' versions when its first rebalance assigns queues and tells the broker
     * with a heartbeat that it only tries to lock; when the client's periodic heartbeat (first
     * run 1 s after start) holds the lock at that moment, the new versions reach the broker only
     * with the next periodic heartbeat, and until then the broker answers every pull
     * SUBSCRIPTION_NOT_LATEST (Apache's broker does the same; the client logs "the
     * subscription is not latest" once a second). Under load that happens now and then. */
    /** Tag of a message sent only to see that a consumer is pulling; collectors do not report it. */
    static final String PROBE_TAG = "Probe";
    static long waitMs = Long.getLong("deadline.ms", 70000L);
    static int instances;

    // ------------------------------------------------------------------ JSON lines

    static synchronized void emit(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        StringBuilder sb = new StringBuilder();
        json(sb, m);
        System.out.println(sb);
        System.out.flush();
    }

    static void json(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                json(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object o : (Collection<?>) v) {
                if (!first) sb.append(',');
                first = false;
                json(sb, o);
            }
            sb.append(']');
        } else {
            String s = String.valueOf(v);
            sb.append('"');
            for (char c : s.toCharArray()) {
                if (c == '"' || c == '\\') sb.append('\\').append(c);
                else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                else sb.append(c);
            }
            sb.append('"');
        }
    }

    static String sha(byte[] body) {
        try {
            StringBuilder sb = new StringBuilder();
            for (byte b : MessageDigest.getInstance("SHA-256").digest(body)) sb.append(String.format("%02x", b));
            return sb.toString();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    static Map<String, Object> sent(String scenario, int idx, Message msg, SendResult r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("scenario", scenario);
        m.put("event", "sent");
        m.put("idx", idx);
        m.put("topic", msg.getTopic());
        m.put("tags", msg.getTags());
        m.put("keys", msg.getKeys());
        m.put("body_sha", sha(msg.getBody()));
        m.put("body_len", msg.getBody().length);
        m.put("uniq_id", MessageClientIDSetter.getUniqID(msg));
        if (r != null) {
            m.put("status", String.valueOf(r.getSendStatus()));
            m.put("msg_id", r.getMsgId());
            m.put("offset_msg_id", r.getOffsetMsgId());
            m.put("queue_id", r.getMessageQueue().getQueueId());
            m.put("broker", r.getMessageQueue().getBrokerName());
            m.put("queue_offset", r.getQueueOffset());
        }
        return m;
    }

    static void emitMap(Map<String, Object> m) {
        List<Object> kv = new ArrayList<>();
        for (Map.Entry<String, Object> e : m.entrySet()) {
            kv.add(e.getKey());
            kv.add(e.getValue());
        }
        emit(kv.toArray());
    }

    static Map<String, Object> received(String scenario, String who, MessageExt m) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("scenario", scenario);
        r.put("event", "recv");
        r.put("who", who);
        r.put("topic", m.getTopic());
        r.put("tags", m.getTags());
        r.put("keys", m.getKeys());
        r.put("msg_id", m.getMsgId());
        r.put("uniq_id", MessageClientIDSetter.getUniqID(m));
        r.put("body_sha", sha(m.getBody()));
        r.put("body_len", m.getBody().length);
        r.put("body", m.getBody().length <= 256 ? new String(m.getBody(), StandardCharsets.UTF_8) : null);
        r.put("props", new TreeMap<>(m.getProperties()));
        r.put("broker", m.getBrokerName());
        r.put("queue_id", m.getQueueId());
        r.put("queue_offset", m.getQueueOffset());
        r.put("commitlog_offset", m.getCommitLogOffset());
        r.put("reconsume_times", m.getReconsumeTimes());
        r.put("born_ts", m.getBornTimestamp());
        r.put("store_ts", m.getStoreTimestamp());
        r.put("sys_flag", m.getSysFlag());
        r.put("now_ms", System.currentTimeMillis());
        return r;
    }

    static void await(String what, BooleanSupplier cond) throws InterruptedException {
        long end = System.currentTimeMillis() + waitMs;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > end) throw new IllegalStateException("timed out waiting for " + what);
            Thread.sleep(20); // polling a condition with a deadline
        }
    }

    // ------------------------------------------------------------------ clients

    static String inst() {
        return prefix + "-i" + (instances++);
    }

    static DefaultMQProducer producer(String group) throws MQClientException {
        DefaultMQProducer p = new DefaultMQProducer(group, hook);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(inst());
        p.setSendMsgTimeout(10000);
        p.start();
        return p;
    }

    static void setModel(DefaultMQPushConsumer c, String model) throws Exception {
        Class<?> cls;
        try {
            cls = Class.forName("org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel");
        } catch (ClassNotFoundException e) {
            cls = Class.forName("org.apache.rocketmq.common.protocol.heartbeat.MessageModel");
        }
        for (Object o : cls.getEnumConstants()) {
            if (o.toString().equals(model)) {
                c.getClass().getMethod("setMessageModel", cls).invoke(c, o);
                return;
            }
        }
        throw new IllegalArgumentException(model);
    }

    static DefaultMQPushConsumer pushConsumer(String group) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook, new org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely());
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(inst());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullInterval(0);
        c.setPersistConsumerOffsetInterval(1000);
        return c;
    }

    static DefaultMQPushConsumer collector(String scenario, String group, String topic, String expr,
                                           List<MessageExt> into) throws Exception {
        DefaultMQPushConsumer c = pushConsumer(group);
        c.subscribe(topic, expr);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (!PROBE_TAG.equals(m.getTags())) emitMap(received(scenario, group, m));
                into.add(m);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        return c;
    }

    static List<String> masters() throws Exception {
        var info = admin.examineBrokerClusterInfo();
        List<String> out = new ArrayList<>();
        for (var bd : info.getBrokerAddrTable().values()) {
            String a = bd.getBrokerAddrs().get(0L);
            if (a != null) out.add(a);
        }
        Collections.sort(out);
        return out;
    }

    static String topic(String name, int queues) throws Exception {
        return rawTopic(prefix + "-" + name, queues);
    }

    /** create {@code t} on every master and wait until the NameServer routes it. */
    static String rawTopic(String t, int queues) throws Exception {
        TopicConfig cfg = new TopicConfig(t, queues, queues, 6);
        for (String addr : masters()) admin.createAndUpdateTopicConfig(addr, cfg);
        await("route of " + t, () -> {
            try {
                var route = admin.examineTopicRouteInfo(t);
                int q = 0;
                for (var qd : route.getQueueDatas()) q += qd.getWriteQueueNums();
                return q > 0;
            } catch (Exception e) {
                return false;
            }
        });
        return t;
    }

    static Message msg(String topic, int idx, String tags, byte[] body) {
        Message m = new Message(topic, tags, body);
        m.setKeys(Arrays.asList("key-" + idx, "alt-" + idx));
        m.putUserProperty("idx", String.valueOf(idx));
        m.putUserProperty("color", idx % 2 == 0 ? "red" : "blue");
        m.putUserProperty("a", String.valueOf(idx));
        return m;
    }

    static byte[] text(int idx) {
        return ("body-" + idx + "-\u00e9\u4e2d").getBytes(StandardCharsets.UTF_8);
    }

    static byte[] bigBody(int size) {
        // compressible but not trivial: words from a fixed pseudo-random walk
        StringBuilder sb = new StringBuilder();
        long x = 42;
        while (sb.length() < size) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            sb.append("w").append((x >>> 50) % 97).append(' ');
        }
        return sb.substring(0, size).getBytes(StandardCharsets.US_ASCII);
    }

    // ------------------------------------------------------------------ scenarios

    /** sync, async, oneway, a compressed 6 KB body and a batch; a push consumer reads them all. */
    static void sends() throws Exception {
        String sc = "sends";
        String t = topic("sends", 4);
        DefaultMQProducer p = producer(prefix + "-pg-sends");
        int idx = 0;
        int total = 0;
        for (; idx < 4; idx++) {
            Message m = msg(t, idx, idx % 2 == 0 ? "TagA" : "TagB", text(idx));
            emitMap(sent(sc, idx, m, p.send(m)));
            total++;
        }
        CountDownLatch latch = new CountDownLatch(4);
        for (; idx < 8; idx++) {
            final int i = idx;
            final Message m = msg(t, idx, "TagA", text(idx));
            p.send(m, new SendCallback() {
                public void onSuccess(SendResult r) {
                    Map<String, Object> s = sent(sc, i, m, r);
                    s.put("mode", "async");
                    emitMap(s);
                    latch.countDown();
                }

                public void onException(Throwable e) {
                    emit("scenario", sc, "event", "error", "idx", i, "error", String.valueOf(e));
                    latch.countDown();
                }
            });
            total++;
        }
        if (!latch.await(waitMs, TimeUnit.MILLISECONDS)) throw new IllegalStateException("async sends");
        for (; idx < 10; idx++) {
            Message m = msg(t, idx, "TagC", text(idx));
            p.sendOneway(m);
            Map<String, Object> s = sent(sc, idx, m, null);
            s.put("mode", "oneway");
            emitMap(s);
            total++;
        }
        Message big = msg(t, idx, "Big", bigBody(6 * 1024));
        emitMap(sent(sc, idx++, big, p.send(big)));
        total++;
        List<Message> batch = new ArrayList<>();
        for (int j = 0; j < 5; j++, idx++) {
            Message m = new Message(t, "Batch", ("batch-" + idx).getBytes(StandardCharsets.UTF_8));
            m.setKeys("key-" + idx);
            m.putUserProperty("idx", String.valueOf(idx));
            batch.add(m);
        }
        SendResult br = p.send(batch);
        int first = idx - 5;
        for (int j = 0; j < batch.size(); j++) {
            Map<String, Object> s = sent(sc, first + j, batch.get(j), br);
            s.put("mode", "batch");
            s.put("batch_pos", j);
            emitMap(s);
        }
        total += 5;
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = collector(sc, prefix + "-cg-sends", t, "*", got);
        final int want = total;
        await("sends consumed", () -> got.size() >= want);
        c.shutdown();
        p.shutdown();
    }

    /** clustering with a tag filter, SQL92 filter, broadcasting to two instances. */
    static void filters() throws Exception {
        String sc = "filters";
        String t = topic("filters", 2);
        DefaultMQProducer p = producer(prefix + "-pg-filters");
        String[] tags = {"TagA", "TagB", "TagC"};
        int tagWant = 0;
        int sqlWant = 0;
        for (int i = 0; i < 12; i++) {
            Message m = msg(t, i, tags[i % 3], text(i));
            emitMap(sent(sc, i, m, p.send(m)));
            if (i % 3 != 1) tagWant++;
            if (i >= 3 && i <= 6) sqlWant++;
        }
        List<MessageExt> tag = new CopyOnWriteArrayList<>();
        List<MessageExt> sql = new CopyOnWriteArrayList<>();
        List<MessageExt> bc1 = new CopyOnWriteArrayList<>();
        List<MessageExt> bc2 = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer ct = collector(sc, prefix + "-cg-tag", t, "TagA || TagC", tag);
        DefaultMQPushConsumer cs = pushConsumer(prefix + "-cg-sql");
        cs.subscribe(t, MessageSelector.bySql("a BETWEEN 3 AND 6"));
        cs.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emitMap(received(sc, "sql", m));
                sql.add(m);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        cs.start();
        List<DefaultMQPushConsumer> bcs = new ArrayList<>();
        for (int k = 0; k < 2; k++) {
            final List<MessageExt> into = k == 0 ? bc1 : bc2;
            final String who = "bc" + (k + 1);
            DefaultMQPushConsumer b = pushConsumer(prefix + "-cg-bc");
            setModel(b, "BROADCASTING");
            b.subscribe(t, "*");
            b.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    emitMap(received(sc, who, m));
                    into.add(m);
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            b.start();
            bcs.add(b);
        }
        final int tw = tagWant;
        final int sw = sqlWant;
        await("filters consumed", () -> tag.size() >= tw && sql.size() >= sw && bc1.size() >= 12 && bc2.size() >= 12);
        ct.shutdown();
        cs.shutdown();
        for (DefaultMQPushConsumer b : bcs) b.shutdown();
        p.shutdown();
    }

    /** orderly: a selector by order id, MessageListenerOrderly. */
    static void orderly() throws Exception {
        String sc = "orderly";
        String t = topic("orderly", 4);
        DefaultMQProducer p = producer(prefix + "-pg-orderly");
        int n = 24;
        for (int i = 0; i < n; i++) {
            int order = i % 3;
            Message m = new Message(t, "Order", ("order-" + order + "-" + i).getBytes(StandardCharsets.UTF_8));
            m.setKeys("order-" + order);
            m.putUserProperty("order", String.valueOf(order));
            m.putUserProperty("seq", String.valueOf(i));
            SendResult r = p.send(m, (mqs, mm, arg) -> mqs.get((Integer) arg % mqs.size()), order);
            Map<String, Object> s = sent(sc, i, m, r);
            s.put("order", order);
            emitMap(s);
        }
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer(prefix + "-cg-orderly");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emitMap(received(sc, "orderly", m));
                got.add(m);
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        await("orderly consumed", () -> got.size() >= n);
        c.shutdown();
        p.shutdown();
    }

    /** delay levels 1 (1 s) and 2 (5 s). */
    static void delay() throws Exception {
        String sc = "delay";
        String t = topic("delay", 2);
        DefaultMQProducer p = producer(prefix + "-pg-delay");
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = collector(sc, prefix + "-cg-delay", t, "*", got);
        // the delays are measured from a consumer that is pulling (see waitMs): a probe first,
        // which the collector counts but does not report
        Message probe = new Message(t, PROBE_TAG, text(0));
        p.send(probe);
        await("the delay consumer's probe", () -> !got.isEmpty());
        got.clear();
        for (int level = 1; level <= 2; level++) {
            Message m = msg(t, level, "Delay", text(level));
            m.setDelayTimeLevel(level);
            long before = System.currentTimeMillis();
            Map<String, Object> s = sent(sc, level, m, p.send(m));
            s.put("level", level);
            s.put("sent_ms", before);
            emitMap(s);
        }
        await("delayed consumed", () -> got.size() >= 2);
        c.shutdown();
        p.shutdown();
    }

    /** The delay level a consumer reads (getDelayTimeLevel): a message sent with level 2, and
     * one whose first delivery asks for a retry at the default level (the broker picks
     * 3 + reconsumeTimes). Run against Apache's broker and ours with short levels. */
    static void delayLevel() throws Exception {
        String sc = "delaylevel";
        String t = topic("dlevel", 1);
        String group = prefix + "-cg-dlevel";
        if (org.apache.rocketmq.common.MQVersion.CURRENT_VERSION
            >= org.apache.rocketmq.common.MQVersion.Version.V5_0_0.ordinal()) {
            rawTopic("%RETRY%" + group, 1);  // see retryDlq
        }
        DefaultMQProducer p = producer(prefix + "-pg-dlevel");
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer(group);
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            boolean retry = false;
            for (MessageExt x : msgs) {
                Map<String, Object> r = received(sc, "consumer", x);
                r.put("delay_level", x.getDelayTimeLevel());
                emitMap(r);
                got.add(x);
                retry |= "Retry".equals(x.getTags()) && x.getReconsumeTimes() == 0;
            }
            return retry ? ConsumeConcurrentlyStatus.RECONSUME_LATER
                         : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Message d = msg(t, 2, "Delayed", text(2));
        d.setDelayTimeLevel(2);
        emitMap(sent(sc, 2, d, p.send(d)));
        Message r = msg(t, 0, "Retry", text(0));
        emitMap(sent(sc, 0, r, p.send(r)));
        await("the delayed message and both deliveries of the retried one", () -> got.size() >= 3);
        c.shutdown();
        p.shutdown();
    }

    /** transactions: commit, rollback, unknown then checked (commit / rollback). */
    static void transactions() throws Exception {
        String sc = "transactions";
        String t = topic("tx", 2);
        Map<Integer, LocalTransactionState> local = new HashMap<>();
        local.put(0, LocalTransactionState.COMMIT_MESSAGE);
        local.put(1, LocalTransactionState.ROLLBACK_MESSAGE);
        local.put(2, LocalTransactionState.UNKNOW);
        local.put(3, LocalTransactionState.UNKNOW);
        Map<Integer, LocalTransactionState> checked = new HashMap<>();
        checked.put(2, LocalTransactionState.COMMIT_MESSAGE);
        checked.put(3, LocalTransactionState.ROLLBACK_MESSAGE);
        Set<Integer> checks = ConcurrentHashMap.newKeySet();
        TransactionMQProducer p = new TransactionMQProducer(prefix + "-pg-tx", hook);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(inst());
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                return local.get((Integer) arg);
            }

            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                int idx = Integer.parseInt(m.getUserProperty("idx"));
                LocalTransactionState st = checked.getOrDefault(idx, LocalTransactionState.ROLLBACK_MESSAGE);
                Map<String, Object> r = received(sc, "check", m);
                r.put("event", "check");
                r.put("idx", idx);
                r.put("transaction_id", m.getTransactionId());
                r.put("answer", String.valueOf(st));
                emitMap(r);
                checks.add(idx);
                return st;
            }
        });
        p.start();
        for (int i = 0; i < 4; i++) {
            Message m = msg(t, i, "Tx", text(i));
            TransactionSendResult r = p.sendMessageInTransaction(m, i);
            Map<String, Object> s = sent(sc, i, m, r);
            s.put("local_state", String.valueOf(r.getLocalTransactionState()));
            s.put("transaction_id", r.getTransactionId());
            emitMap(s);
        }
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = collector(sc, prefix + "-cg-tx", t, "*", got);
        await("transactions checked and consumed", () -> got.size() >= 2 && checks.contains(2) && checks.contains(3));
        // a last committed message: once it is consumed the broker has handled the earlier ends
        Message last = msg(t, 9, "Tx", text(9));
        TransactionMQProducer q = p;
        local.put(9, LocalTransactionState.COMMIT_MESSAGE);
        emitMap(sent(sc, 9, last, q.sendMessageInTransaction(last, 9)));
        await("last transaction consumed", () -> got.size() >= 3);
        c.shutdown();
        p.shutdown();
    }

    /** request-reply: producer.request, a consumer answering with MessageUtil.createReplyMessage. */
    static void requestReply() throws Exception {
        String sc = "reply";
        String t = topic("rr", 2);
        DefaultMQProducer replier = producer(prefix + "-pg-replier");
        DefaultMQPushConsumer c = pushConsumer(prefix + "-cg-rr");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emitMap(received(sc, "server", m));
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("reply-to-" + new String(m.getBody(), StandardCharsets.UTF_8)).getBytes(StandardCharsets.UTF_8));
                    SendResult r = replier.send(reply, 10000);
                    emit("scenario", sc, "event", "replied", "status", String.valueOf(r.getSendStatus()), "topic", reply.getTopic());
                } catch (Exception e) {
                    emit("scenario", sc, "event", "error", "error", String.valueOf(e));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        DefaultMQProducer p = producer(prefix + "-pg-requester");
        for (int i = 0; i < 3; i++) {
            Message m = msg(t, i, "Req", ("req-" + i).getBytes(StandardCharsets.UTF_8));
            Message reply = p.request(m, 15000);
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("scenario", sc);
            r.put("event", "reply");
            r.put("idx", i);
            r.put("body", new String(reply.getBody(), StandardCharsets.UTF_8));
            r.put("topic", reply.getTopic());
            r.put("props", new TreeMap<>(reply.getProperties()));
            emitMap(r);
        }
        p.shutdown();
        c.shutdown();
        replier.shutdown();
    }

    /** retry: RECONSUME_LATER with delay level 1 until maxReconsumeTimes, then the DLQ. */
    static void retryDlq() throws Exception {
        String sc = "retry";
        String t = topic("retry", 1);
        String group = prefix + "-cg-retry";
        if (org.apache.rocketmq.common.MQVersion.CURRENT_VERSION
            >= org.apache.rocketmq.common.MQVersion.Version.V5_0_0.ordinal()) {
            // 5.x clients read a topic's queues before fetching its route in a rebalance round,
            // so a brand-new group's retry queue (created by its first heartbeat) is assigned
            // only in the next round, 20 s later: with Apache's own broker too. 4.x clients
            // find it at once (the broker registers it before answering the heartbeat).
            rawTopic("%RETRY%" + group, 1);
        }
        DefaultMQProducer p = producer(prefix + "-pg-retry");
        Message m = msg(t, 0, "Retry", text(0));
        emitMap(sent(sc, 0, m, p.send(m)));
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer(group);
        c.setMaxReconsumeTimes(2);
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                emitMap(received(sc, "consumer", x));
                got.add(x);
            }
            ctx.setDelayLevelWhenNextConsume(1);
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        c.start();
        await("three deliveries", () -> got.size() >= 3);
        String dlq = "%DLQ%" + group;
        List<MessageExt> dead = new ArrayList<>();
        await("the message in " + dlq, () -> {
            try {
                QueryResult qr = admin.queryMessage(dlq, "key-0", 32, 0, Long.MAX_VALUE);
                dead.clear();
                dead.addAll(qr.getMessageList());
                return !dead.isEmpty();
            } catch (Exception e) {
                return false;
            }
        });
        for (MessageExt x : dead) emitMap(received(sc, "dlq", x));
        c.shutdown();
        p.shutdown();
    }

    /** DefaultLitePullConsumer: assign + seek, and subscribe. */
    static void litePull() throws Exception {
        String sc = "litepull";
        String t = topic("lite", 2);
        DefaultMQProducer p = producer(prefix + "-pg-lite");
        for (int i = 0; i < 10; i++) {
            Message m = msg(t, i, "Lite", text(i));
            emitMap(sent(sc, i, m, p.send(m)));
        }
        DefaultLitePullConsumer a = new DefaultLitePullConsumer(prefix + "-cg-lite-assign", hook);
        a.setNamesrvAddr(namesrv);
        a.setInstanceName(inst());
        a.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        a.setAutoCommit(false);
        a.start();
        List<MessageQueue> mqs = new ArrayList<>(a.fetchMessageQueues(t));
        mqs.sort((x, y) -> x.getBrokerName().equals(y.getBrokerName()) ? x.getQueueId() - y.getQueueId() : x.getBrokerName().compareTo(y.getBrokerName()));
        a.assign(mqs);
        MessageQueue q0 = mqs.get(0);
        a.seek(q0, 2);
        emit("scenario", sc, "event", "seek", "broker", q0.getBrokerName(), "queue_id", q0.getQueueId(), "offset", 2);
        Set<String> seen = new HashSet<>();
        Map<Integer, Set<Long>> offsetsSeen = new TreeMap<>();  // queue -> offsets (for a failure)
        long end = System.currentTimeMillis() + waitMs;
        // everything but the first two of q0 (the test checks what came)
        while (true) {
            for (MessageExt x : a.poll(200)) {
                emitMap(received(sc, "assign", x));
                seen.add(x.getMsgId());
                offsetsSeen.computeIfAbsent(x.getQueueId(), k -> new TreeSet<>()).add(x.getQueueOffset());
            }
            long want = 0;
            for (MessageQueue mq : mqs) {
                long max = admin.maxOffset(mq);
                want += mq.equals(q0) ? Math.max(0, max - 2) : max;
            }
            if (seen.size() >= want) break;
            if (System.currentTimeMillis() >= end) {
                Map<Integer, Long> committed = new TreeMap<>();
                for (MessageQueue mq : mqs) committed.put(mq.getQueueId(), a.committed(mq));
                throw new IllegalStateException("assign: got " + seen.size() + " of " + want
                    + "; offsets seen per queue " + offsetsSeen + ", committed " + committed);
            }
        }
        a.commitSync();
        a.shutdown();
        DefaultLitePullConsumer s = new DefaultLitePullConsumer(prefix + "-cg-lite-sub", hook);
        s.setNamesrvAddr(namesrv);
        s.setInstanceName(inst());
        s.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        s.subscribe(t, "*");
        s.start();
        Set<String> seen2 = new HashSet<>();
        end = System.currentTimeMillis() + waitMs;
        while (seen2.size() < 10 && System.currentTimeMillis() < end) {
            for (MessageExt x : s.poll(200)) {
                emitMap(received(sc, "subscribe", x));
                seen2.add(x.getMsgId());
            }
        }
        if (seen2.size() < 10) throw new IllegalStateException("subscribe: got " + seen2.size() + " of 10");
        s.shutdown();
        p.shutdown();
    }

    /** DefaultMQAdminExt: cluster info, consume stats, query by key and id, reset offset by time. */
    static void adminExt() throws Exception {
        String sc = "admin";
        var info = admin.examineBrokerClusterInfo();
        for (var e : info.getClusterAddrTable().entrySet()) {
            emit("scenario", sc, "event", "cluster", "cluster", e.getKey(), "brokers", new ArrayList<>(new java.util.TreeSet<>(e.getValue())));
        }
        for (var bd : info.getBrokerAddrTable().values()) {
            Map<String, Object> addrs = new TreeMap<>();
            for (var e : bd.getBrokerAddrs().entrySet()) addrs.put(String.valueOf(e.getKey()), e.getValue());
            emit("scenario", sc, "event", "broker", "broker", bd.getBrokerName(), "cluster", bd.getCluster(), "addrs", addrs);
        }
        String t = topic("admin", 2);
        var route = admin.examineTopicRouteInfo(t);
        for (var qd : route.getQueueDatas()) {
            emit("scenario", sc, "event", "route", "broker", qd.getBrokerName(), "read", qd.getReadQueueNums(), "write", qd.getWriteQueueNums(), "perm", qd.getPerm());
        }
        DefaultMQProducer p = producer(prefix + "-pg-admin");
        List<SendResult> results = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            Message m = msg(t, i, "Adm", text(i));
            SendResult r = p.send(m);
            results.add(r);
            emitMap(sent(sc, i, m, r));
        }
        String group = prefix + "-cg-admin";
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = collector(sc, group, t, "*", got);
        await("admin consumed", () -> got.size() >= 6);
        // consume stats once the offsets reached the broker
        await("consume stats", () -> {
            try {
                var cs = admin.examineConsumeStats(group);
                long diff = cs.computeTotalDiff();
                return diff == 0 && cs.getOffsetTable().size() > 0;
            } catch (Exception e) {
                return false;
            }
        });
        var cs = admin.examineConsumeStats(group);
        for (var e : cs.getOffsetTable().entrySet()) {
            emit("scenario", sc, "event", "stats", "broker", e.getKey().getBrokerName(), "queue_id", e.getKey().getQueueId(),
                "broker_offset", e.getValue().getBrokerOffset(), "consumer_offset", e.getValue().getConsumerOffset());
        }
        QueryResult byKey = admin.queryMessage(t, "key-3", 32, 0, Long.MAX_VALUE);
        for (MessageExt x : byKey.getMessageList()) emitMap(received(sc, "by_key", x));
        MessageExt byId = admin.viewMessage(t, results.get(4).getMsgId());
        emitMap(received(sc, "by_uniq_id", byId));
        MessageExt byOffsetId = admin.viewMessage(t, results.get(5).getOffsetMsgId());
        emitMap(received(sc, "by_offset_id", byOffsetId));
        // reset to the store time of the 4th message: everything stored from then on comes again
        long ts = byId.getStoreTimestamp();
        int before = got.size();
        var reset = admin.resetOffsetByTimestamp(t, group, ts, true);
        for (var e : reset.entrySet()) {
            emit("scenario", sc, "event", "reset", "broker", e.getKey().getBrokerName(), "queue_id", e.getKey().getQueueId(), "offset", e.getValue(), "ts", ts);
        }
        long expected = 0;
        for (var e : reset.entrySet()) expected += admin.maxOffset(e.getKey()) - e.getValue();
        final long exp = expected;
        await("re-consumed after reset", () -> got.size() - before >= exp);
        c.shutdown();
        p.shutdown();
    }

    /** ACL: signed sends, query by key, view by unique key (the _UNIQUE_KEY_QUERY trap), a bad secret. */
    static void acl() throws Exception {
        String sc = "acl";
        String t = topic("acl", 2);
        DefaultMQProducer p = producer(prefix + "-pg-acl");
        Message m = msg(t, 0, "Acl", text(0));
        SendResult r = p.send(m);
        emitMap(sent(sc, 0, m, r));
        await("key indexed", () -> {
            try {
                return !admin.queryMessage(t, "key-0", 32, 0, Long.MAX_VALUE).getMessageList().isEmpty();
            } catch (Exception e) {
                return false;
            }
        });
        for (MessageExt x : admin.queryMessage(t, "key-0", 32, 0, Long.MAX_VALUE).getMessageList()) {
            emitMap(received(sc, "by_key", x));
        }
        try {
            emitMap(received(sc, "by_uniq_id", admin.viewMessage(t, r.getMsgId())));
        } catch (Exception e) {
            emit("scenario", sc, "event", "by_uniq_id_failed", "error", String.valueOf(e));
        }
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = collector(sc, prefix + "-cg-acl", t, "*", got);
        await("acl consumed", () -> got.size() >= 1);
        c.shutdown();
        DefaultMQProducer bad = new DefaultMQProducer(prefix + "-pg-bad",
            new AclClientRPCHook(new SessionCredentials(System.getProperty("ak"), "wrong-secret")));
        bad.setNamesrvAddr(namesrv);
        bad.setInstanceName(inst());
        bad.setRetryTimesWhenSendFailed(0);
        bad.start();
        try {
            SendResult br = bad.send(msg(t, 1, "Acl", text(1)));
            emit("scenario", sc, "event", "bad_secret", "status", String.valueOf(br.getSendStatus()));
        } catch (MQBrokerException e) {
            emit("scenario", sc, "event", "bad_secret", "code", e.getResponseCode(), "remark", e.getErrorMessage());
        } catch (Exception e) {
            StringBuilder chain = new StringBuilder();
            for (Throwable x = e; x != null; x = x.getCause()) chain.append(x).append(" <- ");
            emit("scenario", sc, "event", "bad_secret", "error", chain.toString());
        }
        bad.shutdown();
        p.shutdown();
    }

    /** message trace: producer and consumer with enableMsgTrace; the trace records land in RMQ_SYS_TRACE_TOPIC. */
    static void trace() throws Exception {
        String sc = "trace";
        String t = topic("trace", 2);
        DefaultMQProducer p = new DefaultMQProducer(prefix + "-pg-trace", hook, true, null);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(inst());
        p.start();
        Message m = msg(t, 0, "Traced", text(0));
        SendResult r = p.send(m);
        emitMap(sent(sc, 0, m, r));
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(prefix + "-cg-trace", hook,
            new org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely(), true, null);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(inst());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(t, "*");
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                emitMap(received(sc, "consumer", x));
                got.add(x);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        await("traced consumed", () -> got.size() >= 1);
        String traceTopic = "RMQ_SYS_TRACE_TOPIC";
        Set<String> kinds = new HashSet<>();
        await("trace records (Pub, SubBefore, SubAfter)", () -> {
            try {
                kinds.clear();
                for (MessageExt x : admin.queryMessage(traceTopic, r.getMsgId(), 64, 0, Long.MAX_VALUE).getMessageList()) {
                    String body = new String(x.getBody(), StandardCharsets.UTF_8);
                    for (String k : new String[] {"Pub", "SubBefore", "SubAfter"}) {
                        if (body.startsWith(k + '\u0001') || body.contains('\u0002' + k + '\u0001')) kinds.add(k);
                    }
                }
                return kinds.size() == 3;
            } catch (Exception e) {
                return false;
            }
        });
        for (MessageExt x : admin.queryMessage(traceTopic, r.getMsgId(), 64, 0, Long.MAX_VALUE).getMessageList()) {
            Map<String, Object> rec = received(sc, "trace", x);
            rec.put("body", new String(x.getBody(), StandardCharsets.UTF_8));
            emitMap(rec);
        }
        c.shutdown();
        p.shutdown();
    }

    /**
     * a steady stream of numbered sync sends for failover tests: every SEND_OK and every failure.
     * System properties: stream.queues (4), stream.gap.ms (20), stream.max (2000),
     * stream.stop (a path: the stream ends once that file exists), stream.poll.ms (the client's
     * pollNameServerInterval, 1000: how soon it learns a new master's address).
     */
    static void stream() throws Exception {
        String sc = "stream";
        String t = rawTopic(prefix + "-stream", Integer.getInteger("stream.queues", 4));
        int max = Integer.getInteger("stream.max", 2000);
        long gap = Long.getLong("stream.gap.ms", 20L);
        String stop = System.getProperty("stream.stop");
        DefaultMQProducer p = new DefaultMQProducer(prefix + "-pg-stream", hook);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(inst());
        p.setPollNameServerInterval(Integer.getInteger("stream.poll.ms", 1000));
        p.setRetryTimesWhenSendFailed(4);
        p.setSendLatencyFaultEnable(true);
        p.setSendMsgTimeout(3000);
        p.start();
        long end = System.currentTimeMillis() + waitMs;
        for (int i = 0; i < max; i++) {
            if (stop != null && new java.io.File(stop).exists()) break;
            if (System.currentTimeMillis() > end) throw new IllegalStateException("stream: no stop file in time");
            Message m = msg(t, i, "S", text(i));
            long t0 = System.currentTimeMillis();
            try {
                Map<String, Object> s = sent(sc, i, m, p.send(m));
                s.put("start_ms", t0);
                s.put("ms", System.currentTimeMillis() - t0);
                emitMap(s);
            } catch (Exception e) {
                emit("scenario", sc, "event", "send_failed", "idx", i, "uniq_id", MessageClientIDSetter.getUniqID(m),
                     "start_ms", t0, "ms", System.currentTimeMillis() - t0, "error", String.valueOf(e));
            }
            Thread.sleep(gap); // pacing of the workload, not a wait for a condition
        }
        p.shutdown();
    }

    /** a 5.x timer setter by name (reflection: the 4.9 client this file also builds against has none). */
    static void timerSet(Message m, String setter, long value) throws Exception {
        Message.class.getMethod(setter, long.class).invoke(m, value);
    }

    /**
     * timer messages (5.x client only): a consumer listens, then idx 0 is sent with
     * setDeliverTimeMs(now + 1 s), idx 1 with setDelayTimeSec(60) and idx 2 with
     * setDelayTimeMs(timer.mid.ms); "sends_done" says so; the consumer reports every message
     * until the file named by timer.stop exists.
     */
    static void timer() throws Exception {
        String sc = "timer";
        String t = topic("timer", 2);
        String stop = System.getProperty("timer.stop");
        long mid = Long.getLong("timer.mid.ms", 20000L);
        DefaultMQProducer p = producer(prefix + "-pg-timer");
        List<MessageExt> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = collector(sc, prefix + "-cg-timer", t, "*", got);
        p.send(new Message(t, PROBE_TAG, text(0)));
        await("the timer consumer's probe", () -> !got.isEmpty());
        String[] setters = {"setDeliverTimeMs", "setDelayTimeSec", "setDelayTimeMs"};
        for (int idx = 0; idx < 3; idx++) {
            Message m = msg(t, idx, "Timer", text(idx));
            long before = System.currentTimeMillis();
            long value = idx == 0 ? before + 1000 : idx == 1 ? 60 : mid;
            long due = idx == 0 ? value : idx == 1 ? before + 60000 : before + mid;
            timerSet(m, setters[idx], value);
            Map<String, Object> s = sent(sc, idx, m, p.send(m));
            s.put("sent_ms", before);
            s.put("due_ms", due);
            emitMap(s);
        }
        emit("scenario", sc, "event", "sends_done");
        long end = System.currentTimeMillis() + waitMs;
        while (stop == null || !new java.io.File(stop).exists()) {
            if (System.currentTimeMillis() > end) throw new IllegalStateException("timer: no stop file in time");
            Thread.sleep(50); // polling the stop file with a deadline
        }
        c.shutdown();
        p.shutdown();
    }

    /**
     * a push consumer (fresh group, from the first offset) reads {@code PREFIX-stream} until every
     * unique id listed in the file named by drain.ids has arrived; on timeout it names the missing.
     */
    static void drain() throws Exception {
        String sc = "drain";
        String t = prefix + "-stream";
        Set<String> want = new HashSet<>();
        for (String line : java.nio.file.Files.readAllLines(java.nio.file.Paths.get(System.getProperty("drain.ids")))) {
            if (!line.isBlank()) want.add(line.trim());
        }
        Set<String> seen = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = pushConsumer(prefix + "-cg-stream");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                emitMap(received(sc, "drain", x));
                seen.add(MessageClientIDSetter.getUniqID(x));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            await("every acked message of the stream", () -> seen.containsAll(want));
        } catch (IllegalStateException e) {
            List<String> missing = new ArrayList<>(want);
            missing.removeAll(seen);
            Collections.sort(missing);
            emit("scenario", sc, "event", "missing", "uniq_ids", missing);
            throw e;
        } finally {
            c.shutdown();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: Scenarios NAMESRV PREFIX SCENARIO...");
            System.exit(2);
        }
        namesrv = args[0];
        prefix = args[1];
        String ak = System.getProperty("ak");
        if (ak != null) hook = new AclClientRPCHook(new SessionCredentials(ak, System.getProperty("sk")));
        admin = new DefaultMQAdminExt(hook, 10000);
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName(inst());
        admin.start();
        int failed = 0;
        for (int i = 2; i < args.length; i++) {
            String sc = args[i];
            long t0 = System.currentTimeMillis();
            try {
                switch (sc) {
                    case "sends": sends(); break;
                    case "filters": filters(); break;
                    case "orderly": orderly(); break;
                    case "delay": delay(); break;
                    case "delaylevel": delayLevel(); break;
                    case "transactions": transactions(); break;
                    case "reply": requestReply(); break;
                    case "retry": retryDlq(); break;
                    case "litepull": litePull(); break;
                    case "admin": adminExt(); break;
                    case "acl": acl(); break;
                    case "trace": trace(); break;
                    case "stream": stream(); break;
                    case "drain": drain(); break;
                    case "timer": timer(); break;
                    default: throw new IllegalArgumentException("unknown scenario " + sc);
                }
                emit("scenario", sc, "event", "done", "ms", System.currentTimeMillis() - t0);
            } catch (Throwable e) {
                failed++;
                java.io.StringWriter sw = new java.io.StringWriter();
                e.printStackTrace(new java.io.PrintWriter(sw));
                emit("scenario", sc, "event", "failed", "error", String.valueOf(e), "trace", sw.toString());
            }
        }
        admin.shutdown();
        System.exit(failed == 0 ? 0 : 1);
    }
}
