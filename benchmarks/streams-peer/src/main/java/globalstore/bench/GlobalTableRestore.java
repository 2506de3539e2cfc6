package globalstore.bench;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Restores a topic into a Kafka Streams globalTable (RocksDB) and prints one JSON line:
 * seconds from start() to RUNNING, records restored, and the process's peak RSS in MB.
 *
 * <p>Arguments: bootstrap servers, topic, state directory (a fresh one means a cold restore).
 */
public final class GlobalTableRestore {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, "bench-" + UUID.randomUUID());
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
    props.put(StreamsConfig.consumerPrefix("isolation.level"), "read_committed");

    StreamsBuilder builder = new StreamsBuilder();
    builder.globalTable(
        topic,
        Materialized.<Bytes, byte[], KeyValueStore<Bytes, byte[]>>as("table")
            .withKeySerde(Serdes.Bytes())
            .withValueSerde(Serdes.ByteArray()));

    AtomicLong restored = new AtomicLong();
    CountDownLatch running = new CountDownLatch(1);
    try (KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
      streams.setGlobalStateRestoreListener(new Counter(restored));
      streams.setStateListener(
          (now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
              running.countDown();
            }
          });
      long began = System.nanoTime();
      streams.start();
      if (!running.await(900, TimeUnit.SECONDS)) {
        throw new IllegalStateException("not RUNNING after 900 s: " + streams.state());
      }
      double seconds = (System.nanoTime() - began) / 1e9;
      System.out.printf(
          "{\"seconds\": %.4f, \"records\": %d, \"rss_mb\": %.1f}%n",
          seconds, restored.get(), peakRssMb());
    }
  }

  private static double peakRssMb() throws Exception {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith("VmHWM:")) {
        return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0;
      }
    }
    return -1;
  }

  /** Counts what the global thread restores. */
  private record Counter(AtomicLong restored) implements StateRestoreListener {
    @Override
    public void onRestoreStart(TopicPartition tp, String store, long start, long end) {}

    @Override
    public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
      restored.addAndGet(n);
    }

    @Override
    public void onRestoreEnd(TopicPartition tp, String store, long total) {}
  }
}
