import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import com.google.common.hash.Hashing;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.consumer.DefaultMQPushConsumerImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * POP scenarios of issue 33 that PopScenarios leaves out, with Apache's unmodified 5.3.1 client
 * (events through PopScenarios.emit; tests/compat/test_java_pop.py asserts on them).
 *
 *   dlq:  a POP-mode push consumer (the test switched the group with setConsumeMode -m POP and
 *         gave it retryMaxTimes with updateSubGroup -r) returns RECONSUME_LATER for one message
 *         and consumes the others. In POP mode the client answers RECONSUME_LATER with
 *         changeInvisibleTime(popDelayLevel[reconsumeTimes] s) (ConsumeMessagePopConcurrently-
 *         Service); the broker revives the message into the pop retry topic when that runs
 *         out, and into %DLQ%group after retryMaxTimes. The DLQ copy and the retry copies are
 *         read back by key with DefaultMQAdminExt.
 *   fifo: FIFO order per message group under concurrency. Producer threads send at once, each
 *         to its own message groups (the __SHARDINGKEY property, the queue chosen by Guava's
 *         consistentHash of the group as Apache's 5.x proxy chooses it), to a FIFO topic of
 *         several queues; more consumer threads than queues, each with its own client
 *         instance, pop orderly (order=true) through the client's own MQClientAPIImpl, consume
 *         each message (a few ms of work) and ack it. 5.3.1's push consumer cannot do this in
 *         POP mode: it always pops with order=false, and its ConsumeMessagePopOrderlyService
 *         never calls a MessageListenerOrderly (ConsumeRequest.run takes a lock object and
 *         returns), so the pop API is the client's only orderly POP path over remoting.
 */
public final class PopRetryOrderScenarios {
    private PopRetryOrderScenarios() {
    }

    static final String POISON_KEY = "dlq-poison";
    /** How long the dlq scenario keeps consuming after the DLQ copy appeared. */
    static final long TAIL_MS = Long.getLong("dlq.tail.ms", 3000);
    /** The work of consuming one FIFO message. */
    static final long WORK_MS = Long.getLong("fifo.work.ms", 5);

    static String json(Map<String, String> props) {
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<String, String> e : new TreeMap<>(props).entrySet()) {
            if (sb.length() > 1) {
                sb.append(',');
            }
            sb.append(PopScenarios.q(e.getKey())).append(':').append(PopScenarios.q(String.valueOf(e.getValue())));
        }
        return sb.append('}').toString();
    }

    static void emitMessage(String sc, String event, MessageExt m) {
        PopScenarios.emit(sc, event, "body", PopScenarios.body(m), "topic", m.getTopic(),
            "queue_id", m.getQueueId(), "queue_offset", m.getQueueOffset(),
            "reconsume", m.getReconsumeTimes(), "keys", m.getKeys(), "tags", m.getTags(),
            "uniq_id", MessageClientIDSetter.getUniqID(m), "now_ms", System.currentTimeMillis(),
            "props", new PopScenarios.Json(json(m.getProperties())));
    }

    // ------------------------------------------------------------------ retry -> DLQ

    /**
     * 5.3.1 has no setter for the push consumer's popDelayLevel (10 s, 30 s, 1 min, ...: the
     * invisible time RECONSUME_LATER asks for, by reconsume times). One second a step keeps the
     * scenario to seconds; the client's code path is unchanged, only the table's values.
     */
    static void shortenPopDelays(DefaultMQPushConsumer c) throws Exception {
        Field f = DefaultMQPushConsumerImpl.class.getDeclaredField("popDelayLevel");
        f.setAccessible(true);
        Arrays.fill((int[]) f.get(c.getDefaultMQPushConsumerImpl()), 1);
    }

    static DefaultMQPushConsumer dlqConsumer(String sc, String group, String topic,
                                             Map<String, Integer> consumed) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(PopScenarios.namesrv);
        c.setInstanceName(PopScenarios.prefix + "DlqC");
        c.setClientRebalance(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPopBatchNums(1);  // RECONSUME_LATER fails a whole batch: one message a batch
        c.setPopInvisibleTime(5000);  // the least the client takes (below: 60 s)
        shortenPopDelays(c);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emitMessage(sc, "recv", m);
                if (POISON_KEY.equals(m.getKeys())) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                consumed.merge(PopScenarios.body(m), 1, Integer::sum);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return c;
    }

    static SendResult sendEmitted(String sc, DefaultMQProducer p, Message m) throws Exception {
        SendResult r = p.send(m);
        PopScenarios.emit(sc, "sent", "body", new String(m.getBody(), StandardCharsets.UTF_8),
            "status", r.getSendStatus(), "msg_id", r.getMsgId(), "queue_id",
            r.getMessageQueue().getQueueId(), "props", new PopScenarios.Json(json(m.getProperties())));
        return r;
    }

    static List<MessageExt> queryByKey(DefaultMQAdminExt admin, String topic, String key) {
        try {
            QueryResult qr = admin.queryMessage(topic, key, 32, 0, Long.MAX_VALUE);
            return qr.getMessageList();
        } catch (Exception e) {  // no route or no index entry yet
            return new ArrayList<>();
        }
    }

    static void dlq(String sc) throws Exception {
        String topic = PopScenarios.prefix + "DlqT";
        String group = PopScenarios.prefix + "DlqG";
        Map<String, Integer> consumed = new ConcurrentHashMap<>();
        DefaultMQPushConsumer c = dlqConsumer(sc, group, topic, consumed);
        c.start();
        DefaultMQProducer p = PopScenarios.producer(PopScenarios.prefix + "DlqP");
        DefaultMQAdminExt admin = new DefaultMQAdminExt(PopScenarios.prefix + "DlqAdmin");
        admin.setNamesrvAddr(PopScenarios.namesrv);
        admin.start();
        try {
            Message poison = new Message(topic, "TagD", POISON_KEY, "poison".getBytes(StandardCharsets.UTF_8));
            poison.putUserProperty("origin", "popDlq");
            sendEmitted(sc, p, poison);
            List<String> ok = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                ok.add("ok-" + i);
                sendEmitted(sc, p, new Message(topic, "TagD", ("ok-" + i).getBytes(StandardCharsets.UTF_8)));
            }
            PopScenarios.waitFor("the others consumed", () -> consumed.keySet().containsAll(ok));
            String dlqTopic = "%DLQ%" + group;
            List<MessageExt> dead = new ArrayList<>();
            PopScenarios.waitFor("the message in " + dlqTopic, () -> {
                dead.addAll(queryByKey(admin, dlqTopic, POISON_KEY));
                return !dead.isEmpty();
            });
            long seen = System.currentTimeMillis();
            for (MessageExt m : dead) {
                emitMessage(sc, "dlq", m);
            }
            // the pop retry topic (v1): what the revives wrote before the DLQ copy
            for (MessageExt m : queryByKey(admin, "%RETRY%" + group + "_" + topic, POISON_KEY)) {
                emitMessage(sc, "retry_copy", m);
            }
            // keep consuming a while: a further redelivery (1 s steps) would show up here
            sendEmitted(sc, p, new Message(topic, "TagD", "after".getBytes(StandardCharsets.UTF_8)));
            PopScenarios.waitFor("the last message consumed and the tail",
                () -> consumed.containsKey("after") && System.currentTimeMillis() >= seen + TAIL_MS);
            for (Map.Entry<String, Integer> e : consumed.entrySet()) {
                PopScenarios.emit(sc, "count", "body", e.getKey(), "n", e.getValue());
            }
        } finally {
            admin.shutdown();
            p.shutdown();
            c.shutdown();
        }
    }

    // ------------------------------------------------------------------ FIFO under concurrency

    /** Apache 5.x's proxy puts a message group on consistentHash(group.hashCode(), queues). */
    static final MessageQueueSelector BY_GROUP = (mqs, msg, arg) ->
        mqs.get(Hashing.consistentHash(((String) arg).hashCode(), mqs.size()));

    static final class Fifo {
        final String sc;
        final String topic;
        final String group;
        final int total;
        final AtomicInteger acked = new AtomicInteger();
        final AtomicBoolean stop = new AtomicBoolean();
        final Set<Throwable> errors = ConcurrentHashMap.newKeySet();
        final AtomicLong pops = new AtomicLong();

        Fifo(String sc, String topic, String group, int total) {
            this.sc = sc;
            this.topic = topic;
            this.group = group;
            this.total = total;
        }
    }

    static List<MessageQueue> route(DefaultMQProducer p, String topic) throws InterruptedException {
        List<MessageQueue> mqs = new ArrayList<>();
        PopScenarios.waitFor("the route of " + topic, () -> {
            try {
                mqs.clear();
                mqs.addAll(p.fetchPublishMessageQueues(topic));
                return !mqs.isEmpty();
            } catch (Exception e) {
                return false;
            }
        });
        return mqs;
    }

    /** One consumer: orderly pops (any queue), each message consumed then acked, in turn. */
    static void consume(Fifo f, String who, PopScenarios.Api a) throws Exception {
        long end = System.currentTimeMillis() + PopScenarios.DEADLINE_MS;
        while (!f.stop.get() && System.currentTimeMillis() < end) {
            PopResult r = a.pop(f.topic, -1, 2, 30000, 1000, true);
            f.pops.incrementAndGet();
            if (r.getPopStatus() != PopStatus.FOUND || r.getMsgFoundList() == null) {
                continue;
            }
            long popped = System.currentTimeMillis();
            for (MessageExt m : r.getMsgFoundList()) {
                long start = System.currentTimeMillis();
                Thread.sleep(WORK_MS);  // the consumer's own work on the message
                long done = System.currentTimeMillis();
                String status = String.valueOf(a.ack(m).getStatus());
                PopScenarios.emit(f.sc, "consumed", "who", who, "group", m.getUserProperty("group"),
                    "seq", Integer.parseInt(m.getUserProperty("seq")), "queue_id", m.getQueueId(),
                    "queue_offset", m.getQueueOffset(), "reconsume", m.getReconsumeTimes(),
                    "popped_ms", popped, "start_ms", start, "done_ms", done,
                    "acked_ms", System.currentTimeMillis(), "ack", status,
                    "pop_ck", m.getProperty(MessageConst.PROPERTY_POP_CK));
                if (f.acked.incrementAndGet() >= f.total) {
                    f.stop.set(true);
                }
            }
        }
    }

    /** One producer thread: its groups' messages, in turn, each send answered before the next. */
    static void produce(Fifo f, DefaultMQProducer p, List<String> groups, int perGroup)
        throws Exception {
        for (int seq = 0; seq < perGroup; seq++) {
            for (String g : groups) {
                Message m = new Message(f.topic, "TagF", (g + ":" + seq).getBytes(StandardCharsets.UTF_8));
                MessageAccessor.putProperty(m, MessageConst.PROPERTY_SHARDING_KEY, g);
                m.putUserProperty("group", g);
                m.putUserProperty("seq", String.valueOf(seq));
                long before = System.currentTimeMillis();
                SendResult r = p.send(m, BY_GROUP, g);
                PopScenarios.emit(f.sc, "sent", "group", g, "seq", seq, "status", r.getSendStatus(),
                    "queue_id", r.getMessageQueue().getQueueId(), "queue_offset", r.getQueueOffset(),
                    "before_ms", before, "after_ms", System.currentTimeMillis());
            }
        }
    }

    static Thread thread(Fifo f, String name, ThrowingRunnable body) {
        Thread t = new Thread(() -> {
            try {
                body.run();
            } catch (Throwable e) {
                f.errors.add(e);
                f.stop.set(true);
            }
        }, name);
        t.start();
        return t;
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    static void fifo(String sc) throws Exception {
        int producers = Integer.getInteger("fifo.producers", 4);
        int groupsEach = Integer.getInteger("fifo.groups.each", 3);
        int perGroup = Integer.getInteger("fifo.per.group", 10);
        int consumers = Integer.getInteger("fifo.consumers", 6);
        Fifo f = new Fifo(sc, PopScenarios.prefix + "OrderT", PopScenarios.prefix + "OrderG",
            producers * groupsEach * perGroup);
        List<DefaultMQProducer> clients = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        try {
            DefaultMQProducer p = PopScenarios.producer(PopScenarios.prefix + "OrderP");
            clients.add(p);
            String brokerName = route(p, f.topic).get(0).getBrokerName();
            for (int i = 0; i < consumers; i++) {
                // each consumer its own client instance (connection), as separate processes have
                DefaultMQProducer own = PopScenarios.producer(PopScenarios.prefix + "OrderC" + i);
                clients.add(own);
                MQClientInstance factory = own.getDefaultMQProducerImpl().getMqClientFactory();
                // the instance learns broker addresses from routes it updates (a send does it;
                // fetchPublishMessageQueues does not): without one, a call goes to the NameServer
                PopScenarios.waitFor("the broker's address", () -> {
                    factory.updateTopicRouteInfoFromNameServer(f.topic);
                    return factory.findBrokerAddressInPublish(brokerName) != null;
                });
                PopScenarios.Api a = new PopScenarios.Api(factory, brokerName, f.group);
                String who = "c" + i;
                threads.add(thread(f, who, () -> consume(f, who, a)));
            }
            CountDownLatch go = new CountDownLatch(1);
            for (int i = 0; i < producers; i++) {
                List<String> groups = new ArrayList<>();
                for (int g = 0; g < groupsEach; g++) {
                    groups.add("g" + i + "-" + g);
                }
                threads.add(thread(f, "p" + i, () -> {
                    go.await();
                    produce(f, p, groups, perGroup);
                }));
            }
            go.countDown();
            PopScenarios.waitFor("every FIFO message consumed", () -> f.stop.get());
            f.stop.set(true);
            for (Thread t : threads) {
                t.join(PopScenarios.DEADLINE_MS);
            }
            for (Throwable e : f.errors) {
                throw new IllegalStateException("a FIFO thread failed", e);
            }
            PopScenarios.emit(sc, "fifo_done", "acked", f.acked.get(), "total", f.total, "pops", f.pops.get());
        } finally {
            f.stop.set(true);
            for (DefaultMQProducer c : clients) {
                c.shutdown();
            }
        }
    }
}
