import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;

import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;

/**
 * POP scenarios for Apache's unmodified RocketMQ 5.x Java client over remoting. One JSON line per
 * observation; the Python test (tests/compat/test_java_pop.py) asserts on them.
 *
 * Usage: java -cp ... PopScenarios NAMESRV PREFIX SCENARIO...
 *   push: push consumers (clientRebalance=false, so the broker's QUERY_ASSIGNMENT decides; the
 *         test switched the group to POP with the real mqadmin first), more consumers than
 *         queues; one message fails once (RECONSUME_LATER: changeInvisibleTime, redelivered)
 *   api:  the client's own pop / ack / changeInvisibleTime calls (MQClientAPIImpl): invisible
 *         time redelivery through the retry topic, change-invisible, orderly pop
 *   dlq, fifo: retry -> DLQ, and FIFO order per message group under concurrency
 *         (PopRetryOrderScenarios)
 */
public final class PopScenarios {
    static String namesrv;
    static String prefix;
    static final long DEADLINE_MS = Long.getLong("deadline.ms", 45000);

    public static void main(String[] args) throws Exception {
        namesrv = args[0];
        prefix = args[1];
        int failures = 0;
        for (int i = 2; i < args.length; i++) {
            String sc = args[i];
            try {
                if (sc.equals("push")) {
                    push(sc);
                } else if (sc.equals("api")) {
                    api(sc);
                } else if (sc.equals("dlq")) {
                    PopRetryOrderScenarios.dlq(sc);
                } else if (sc.equals("fifo")) {
                    PopRetryOrderScenarios.fifo(sc);
                } else {
                    throw new IllegalArgumentException("unknown scenario " + sc);
                }
                emit(sc, "done");
            } catch (Throwable t) {
                failures++;
                emit(sc, "failed", "error", String.valueOf(t));
                t.printStackTrace();
            }
        }
        System.out.flush();
        System.exit(failures == 0 ? 0 : 1);
    }

    // ------------------------------------------------------------------ output

    static synchronized void emit(String scenario, String event, Object... kv) {
        StringBuilder sb = new StringBuilder("{\"scenario\":").append(q(scenario))
            .append(",\"event\":").append(q(event));
        for (int i = 0; i + 1 < kv.length; i += 2) {
            sb.append(',').append(q(String.valueOf(kv[i]))).append(':');
            Object v = kv[i + 1];
            boolean bare = v instanceof Number || v instanceof Boolean || v instanceof Json;
            sb.append(bare ? String.valueOf(v) : q(String.valueOf(v)));
        }
        System.out.println(sb.append('}'));
    }

    /** A value emit writes as it is: already JSON. */
    static final class Json {
        final String text;

        Json(String text) {
            this.text = text;
        }

        @Override
        public String toString() {
            return text;
        }
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

    static void waitFor(String what, BooleanSupplier cond) throws InterruptedException {
        long end = System.currentTimeMillis() + DEADLINE_MS;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > end) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    static DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(group);
        p.start();
        return p;
    }

    // ------------------------------------------------------------------ push consumers in POP mode

    static void push(String sc) throws Exception {
        String topic = prefix + "PushT";
        String group = prefix + "PushG";
        int consumers = Integer.getInteger("push.consumers", 6);
        Map<String, Integer> perConsumer = new ConcurrentHashMap<>();
        Set<String> received = ConcurrentHashMap.newKeySet();
        AtomicInteger failOnceSeen = new AtomicInteger();
        List<DefaultMQPushConsumer> started = new ArrayList<>();
        try {
            for (int i = 0; i < consumers; i++) {
                String who = "c" + i;
                DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
                c.setNamesrvAddr(namesrv);
                c.setInstanceName(prefix + who);
                c.setClientRebalance(false);
                c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                c.setPopBatchNums(1);
                c.subscribe(topic, "*");
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        String body = new String(m.getBody(), StandardCharsets.UTF_8);
                        emit(sc, "recv", "who", who, "body", body, "queue_id", m.getQueueId(),
                            "reconsume", m.getReconsumeTimes(), "topic", m.getTopic(),
                            "pop_ck", m.getProperty(MessageConst.PROPERTY_POP_CK));
                        if (body.equals("fail-once") && failOnceSeen.getAndIncrement() == 0) {
                            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                        }
                        perConsumer.merge(who, 1, Integer::sum);
                        received.add(body);
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                started.add(c);
            }
            DefaultMQProducer p = producer(prefix + "PushP");
            try {
                List<String> sent = new ArrayList<>();
                SendResult r = p.send(new Message(topic, "fail-once".getBytes(StandardCharsets.UTF_8)));
                emit(sc, "sent", "body", "fail-once", "status", r.getSendStatus());
                sent.add("fail-once");
                long end = System.currentTimeMillis() + DEADLINE_MS;
                for (int k = 0; perConsumer.size() < consumers && k < 400
                        && System.currentTimeMillis() < end; k++) {
                    String body = "m" + k;
                    r = p.send(new Message(topic, body.getBytes(StandardCharsets.UTF_8)));
                    emit(sc, "sent", "body", body, "status", r.getSendStatus(),
                        "queue_id", r.getMessageQueue().getQueueId());
                    sent.add(body);
                    Thread.sleep(40);
                }
                waitFor("every message consumed", () -> received.containsAll(sent));
            } finally {
                p.shutdown();
            }
            for (Map.Entry<String, Integer> e : perConsumer.entrySet()) {
                emit(sc, "count", "who", e.getKey(), "n", e.getValue());
            }
        } finally {
            for (DefaultMQPushConsumer c : started) {
                c.shutdown();
            }
        }
    }

    // ------------------------------------------------------------------ the client's pop API

    static final class Api {
        final MQClientAPIImpl api;
        final String brokerName;
        final String addr;
        final String group;

        Api(MQClientInstance factory, String brokerName, String group) {
            this.api = factory.getMQClientAPIImpl();
            this.brokerName = brokerName;
            this.addr = factory.findBrokerAddressInPublish(brokerName);
            this.group = group;
        }

        PopResult pop(String topic, int queueId, int max, long invisibleMs, long pollMs, boolean order)
            throws Exception {
            PopMessageRequestHeader h = new PopMessageRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(topic);
            h.setQueueId(queueId);
            h.setMaxMsgNums(max);
            h.setInvisibleTime(invisibleMs);
            h.setPollTime(pollMs);
            h.setBornTime(System.currentTimeMillis());
            h.setInitMode(0);
            h.setOrder(order);
            CompletableFuture<PopResult> f = new CompletableFuture<>();
            api.popMessageAsync(brokerName, addr, h, pollMs + 10000, new PopCallback() {
                public void onSuccess(PopResult r) {
                    f.complete(r);
                }

                public void onException(Throwable t) {
                    f.completeExceptionally(t);
                }
            });
            return f.get(pollMs + 15000, TimeUnit.MILLISECONDS);
        }

        AckResult ack(MessageExt m) throws Exception {
            String extra = m.getProperty(MessageConst.PROPERTY_POP_CK);
            String[] info = ExtraInfoUtil.split(extra);
            AckMessageRequestHeader h = new AckMessageRequestHeader();
            h.setTopic(ExtraInfoUtil.getRealTopic(info, m.getTopic(), group));
            h.setQueueId(ExtraInfoUtil.getQueueId(info));
            h.setOffset(ExtraInfoUtil.getQueueOffset(info));
            h.setConsumerGroup(group);
            h.setExtraInfo(extra);
            CompletableFuture<AckResult> f = new CompletableFuture<>();
            api.ackMessageAsync(addr, 10000, callback(f), h);
            return f.get(15, TimeUnit.SECONDS);
        }

        AckResult changeInvisible(MessageExt m, long invisibleMs) throws Exception {
            String extra = m.getProperty(MessageConst.PROPERTY_POP_CK);
            String[] info = ExtraInfoUtil.split(extra);
            ChangeInvisibleTimeRequestHeader h = new ChangeInvisibleTimeRequestHeader();
            h.setTopic(ExtraInfoUtil.getRealTopic(info, m.getTopic(), group));
            h.setQueueId(ExtraInfoUtil.getQueueId(info));
            h.setOffset(ExtraInfoUtil.getQueueOffset(info));
            h.setConsumerGroup(group);
            h.setExtraInfo(extra);
            h.setInvisibleTime(invisibleMs);
            CompletableFuture<AckResult> f = new CompletableFuture<>();
            api.changeInvisibleTimeAsync(brokerName, addr, h, 10000, callback(f));
            AckResult r = f.get(15, TimeUnit.SECONDS);
            m.getProperties().put(MessageConst.PROPERTY_POP_CK, r.getExtraInfo());
            return r;
        }

        static AckCallback callback(CompletableFuture<AckResult> f) {
            return new AckCallback() {
                public void onSuccess(AckResult r) {
                    f.complete(r);
                }

                public void onException(Throwable t) {
                    f.completeExceptionally(t);
                }
            };
        }
    }

    static String body(MessageExt m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    static void emitPopped(String sc, String step, PopResult r) {
        emit(sc, "popped", "step", step, "status", r.getPopStatus(), "n",
            r.getMsgFoundList() == null ? 0 : r.getMsgFoundList().size());
        if (r.getMsgFoundList() != null) {
            for (MessageExt m : r.getMsgFoundList()) {
                emit(sc, "msg", "step", step, "body", body(m), "reconsume", m.getReconsumeTimes(),
                    "topic", m.getTopic(), "queue_id", m.getQueueId(),
                    "pop_ck", m.getProperty(MessageConst.PROPERTY_POP_CK));
            }
        }
    }

    /** Pop until something is found or the deadline passes (long polling, 2 s a call). */
    static PopResult popFound(Api a, String topic, int queueId, int max, long invisibleMs, boolean order)
        throws Exception {
        long end = System.currentTimeMillis() + DEADLINE_MS;
        while (true) {
            PopResult r = a.pop(topic, queueId, max, invisibleMs, 2000, order);
            if (r.getPopStatus() == PopStatus.FOUND || System.currentTimeMillis() > end) {
                return r;
            }
        }
    }

    static void api(String sc) throws Exception {
        String topic = prefix + "ApiT";
        String fifo = prefix + "FifoT";
        DefaultMQProducer p = producer(prefix + "ApiP");
        try {
            String brokerName = null;
            for (String b : new String[] {"keep", "change", "expire"}) {
                SendResult r = p.send(new Message(topic, b.getBytes(StandardCharsets.UTF_8)),
                    new MessageQueue(topic, p.fetchPublishMessageQueues(topic).get(0).getBrokerName(), 0));
                brokerName = r.getMessageQueue().getBrokerName();
            }
            MQClientInstance factory = p.getDefaultMQProducerImpl().getMqClientFactory();
            Api a = new Api(factory, brokerName, prefix + "ApiG");
            List<MessageExt> firstMsgs = new ArrayList<>();
            long firstEnd = System.currentTimeMillis() + DEADLINE_MS;
            while (firstMsgs.size() < 3 && System.currentTimeMillis() < firstEnd) {
                PopResult first = popFound(a, topic, -1, 32, 4000, false);
                emitPopped(sc, "first", first);
                if (first.getMsgFoundList() != null) {
                    firstMsgs.addAll(first.getMsgFoundList());
                }
            }
            for (MessageExt m : firstMsgs) {
                if (body(m).equals("keep")) {
                    emit(sc, "ack", "step", "first", "status", a.ack(m).getStatus());
                } else if (body(m).equals("change")) {
                    AckResult r = a.changeInvisible(m, 0);
                    emit(sc, "changed", "status", r.getStatus(), "extra", r.getExtraInfo());
                }
            }
            // "change" is visible again at once, "expire" after its 4 s
            for (int round = 0; round < 2; round++) {
                PopResult again = popFound(a, topic, -1, 32, 60000, false);
                emitPopped(sc, "again" + round, again);
                for (MessageExt m : again.getMsgFoundList()) {
                    emit(sc, "ack", "step", "again" + round, "status", a.ack(m).getStatus());
                }
            }
            // orderly: one batch in flight per queue until acked
            for (int i = 0; i < 4; i++) {
                p.send(new Message(fifo, ("f" + i).getBytes(StandardCharsets.UTF_8)),
                    new MessageQueue(fifo, brokerName, 0));
            }
            Api o = new Api(factory, brokerName, prefix + "FifoG");
            PopResult b1 = popFound(o, fifo, 0, 2, 60000, true);
            emitPopped(sc, "fifo1", b1);
            emitPopped(sc, "fifo-blocked", o.pop(fifo, 0, 2, 60000, 0, true));
            for (MessageExt m : b1.getMsgFoundList()) {
                emit(sc, "ack", "step", "fifo1", "status", o.ack(m).getStatus());
            }
            PopResult b2 = popFound(o, fifo, 0, 2, 60000, true);
            emitPopped(sc, "fifo2", b2);
        } finally {
            p.shutdown();
        }
    }
}
