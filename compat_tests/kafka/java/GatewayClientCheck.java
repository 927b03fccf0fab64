// The official Java client (kafka-clients) against a gateway: each check prints "OK name" or
// "FAIL name: reason"; the exit code is the number of failed checks.
//
// usage: java -cp ... GatewayClientCheck BOOTSTRAP TOPIC_PREFIX

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class GatewayClientCheck {
    private static final Duration POLL_FOR = Duration.ofSeconds(60);
    private static String bootstrap;
    private static String prefix;
    private static int failed = 0;

    interface Check { void run() throws Exception; }

    public static void main(String[] args) {
        bootstrap = args[0];
        prefix = args[1];
        check("admin-create-describe", GatewayClientCheck::adminCreateAndDescribe);
        check("idempotent-produce", GatewayClientCheck::idempotentProduce);
        check("group-consume-commit", () -> groupConsumeAndCommit("classic"));
        check("consumer-protocol-group", () -> groupConsumeAndCommit("consumer"));
        check("transaction-read-committed", GatewayClientCheck::transactionReadCommitted);
        System.exit(failed);
    }

    private static void check(String name, Check body) {
        try {
            body.run();
            System.out.println("OK " + name);
        } catch (Throwable e) {
            failed++;
            System.out.println("FAIL " + name + ": " + e);
            e.printStackTrace(System.out);
        }
        System.out.flush();
    }

    private static void require(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    private static Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    private static String topic(String name) {
        return prefix + "-" + name;
    }

    private static void adminCreateAndDescribe() throws Exception {
        Properties p = common();
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        try (Admin admin = Admin.create(p)) {
            List<NewTopic> topics = new ArrayList<>();
            for (String name : List.of("orders", "payments", "ledger")) {
                topics.add(new NewTopic(topic(name), 3, (short) 1));
            }
            admin.createTopics(topics).all().get(30, TimeUnit.SECONDS);
            Set<String> names = admin.listTopics().names().get(30, TimeUnit.SECONDS);
            require(names.contains(topic("orders")), "listTopics misses the new topic: " + names);
            Map<String, TopicDescription> described =
                admin.describeTopics(List.of(topic("orders"))).allTopicNames().get(30, TimeUnit.SECONDS);
            require(described.get(topic("orders")).partitions().size() == 3, "describeTopics: " + described);
        }
    }

    private static KafkaProducer<String, String> producer(Properties extra) {
        Properties p = common();
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    private static KafkaConsumer<String, String> consumer(String group, Properties extra) {
        Properties p = common();
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    private static List<ConsumerRecord<String, String>> pollUntil(KafkaConsumer<String, String> c, int count) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.nanoTime() + POLL_FOR.toNanos();
        while (got.size() < count && System.nanoTime() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                got.add(r);
            }
        }
        return got;
    }

    private static void idempotentProduce() throws Exception {
        // Each compression codec the client ships, headers and explicit timestamps, acks=all.
        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
            Properties extra = new Properties();
            extra.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            extra.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            try (KafkaProducer<String, String> producer = producer(extra)) {
                long previous = -1;
                for (int i = 0; i < 20; i++) {
                    ProducerRecord<String, String> record = new ProducerRecord<>(
                        topic("orders"), 0, 1_700_000_000_000L + i, "order-" + i, codec + "-" + i);
                    record.headers().add("codec", codec.getBytes(StandardCharsets.UTF_8));
                    RecordMetadata sent = producer.send(record).get(30, TimeUnit.SECONDS);
                    require(sent.offset() > previous, "offsets not increasing: " + sent.offset());
                    previous = sent.offset();
                }
            }
        }
        try (KafkaConsumer<String, String> c = consumer(null, new Properties())) {
            TopicPartition tp = new TopicPartition(topic("orders"), 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = pollUntil(c, 100);
            require(got.size() == 100, "read back " + got.size() + " of 100");
            ConsumerRecord<String, String> last = got.get(99);
            require(last.value().equals("zstd-19") && last.key().equals("order-19"), "last record: " + last);
            require(last.timestamp() == 1_700_000_000_019L, "timestamp: " + last.timestamp());
            Header codec = last.headers().lastHeader("codec");
            require(codec != null && new String(codec.value(), StandardCharsets.UTF_8).equals("zstd"), "header");
            c.seek(tp, 40);
            ConsumerRecord<String, String> sought = pollUntil(c, 1).get(0);
            require(sought.offset() == 40 && sought.value().equals("snappy-0"), "seek: " + sought);
        }
    }

    private static void groupConsumeAndCommit(String protocol) throws Exception {
        String group = prefix + "-group-" + protocol;
        String name = topic("payments");
        try (KafkaProducer<String, String> producer = producer(new Properties())) {
            for (int i = 0; i < 30; i++) {
                producer.send(new ProducerRecord<>(name, "k" + i, protocol + "-" + i));
            }
            producer.flush();
        }
        Properties extra = new Properties();
        extra.put("group.protocol", protocol);
        int total = protocol.equals("classic") ? 30 : 60;   // the second group finds the first one's 30 too
        try (KafkaConsumer<String, String> c = consumer(group, extra)) {
            c.subscribe(List.of(name));
            List<ConsumerRecord<String, String>> got = pollUntil(c, total);
            require(got.size() == total, protocol + ": consumed " + got.size() + " of " + total);
            c.commitSync(Duration.ofSeconds(30));
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(c.assignment(), Duration.ofSeconds(30));
            long sum = 0;
            for (OffsetAndMetadata o : committed.values()) {
                sum += o == null ? 0 : o.offset();
            }
            require(sum == total, protocol + ": committed offsets sum to " + sum);
        }
    }

    private static void transactionReadCommitted() throws Exception {
        String name = topic("ledger");
        Properties extra = new Properties();
        extra.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, prefix + "-tx");
        try (KafkaProducer<String, String> producer = producer(extra)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>(name, 0, "k" + i, "aborted-" + i));
            }
            producer.abortTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>(name, 0, "k" + i, "committed-" + i));
            }
            producer.commitTransaction();
        }
        Properties committedOnly = new Properties();
        committedOnly.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (KafkaConsumer<String, String> c = consumer(prefix + "-tx-reader", committedOnly)) {
            c.subscribe(List.of(name));
            List<ConsumerRecord<String, String>> got = pollUntil(c, 5);
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofSeconds(2))) {
                got.add(r);    // nothing more may come: the aborted ones stay hidden
            }
            List<String> values = new ArrayList<>();
            for (ConsumerRecord<String, String> r : got) {
                values.add(r.value());
            }
            require(values.equals(List.of("committed-0", "committed-1", "committed-2", "committed-3", "committed-4")),
                    "read_committed saw " + values);
        }
    }
}
