package globalstore.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * Follows a topic in a Kafka Streams globalTable while reader threads query it: the Kafka
 * Streams column of the fault table (benchmarks/bench_faults_peer.py drives the faults).
 *
 * <p>Arguments: bootstrap servers, topic, state directory, reader threads, key count (the
 * readers get random keys k00000..). Once RUNNING it prints a JSON line every 500 ms: ms
 * since RUNNING, the state, reads, failed reads, the slowest read in ms, the value of key
 * "seq" (the driver's counter, to time the catch-up) and the first read failure. On "dump"
 * from stdin it prints every key and value as "key\tvalue" lines, then "end"; on "stop" it
 * closes and exits.
 */
public final class GlobalTableFollow {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    int readers = Integer.parseInt(args[3]);
    int keys = Integer.parseInt(args[4]);
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, "faults-" + UUID.randomUUID());
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);

    StreamsBuilder builder = new StreamsBuilder();
    builder.globalTable(
        topic,
        Materialized.<String, String, KeyValueStore<org.apache.kafka.common.utils.Bytes, byte[]>>as(
                "table")
            .withKeySerde(Serdes.String())
            .withValueSerde(Serdes.String()));

    CountDownLatch running = new CountDownLatch(1);
    AtomicReference<String> state = new AtomicReference<>("CREATED");
    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setStateListener(
        (now, before) -> {
          state.set(now.name());
          if (now == KafkaStreams.State.RUNNING) {
            running.countDown();
          }
        });
    streams.start();
    if (!running.await(900, TimeUnit.SECONDS)) {
      throw new IllegalStateException("not RUNNING after 900 s: " + streams.state());
    }
    ReadOnlyKeyValueStore<String, String> store =
        streams.store(
            StoreQueryParameters.fromNameAndType("table", QueryableStoreTypes.keyValueStore()));

    AtomicLong reads = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    AtomicLong slowestNanos = new AtomicLong();
    AtomicReference<String> firstError = new AtomicReference<>("");
    List<Thread> threads = new ArrayList<>();
    for (int i = 0; i < readers; i++) {
      Thread reader =
          new Thread(
              () -> {
                while (!Thread.currentThread().isInterrupted()) {
                  String key = String.format("k%05d", ThreadLocalRandom.current().nextInt(keys));
                  long began = System.nanoTime();
                  try {
                    store.get(key);
                  } catch (RuntimeException e) {
                    failed.incrementAndGet();
                    firstError.compareAndSet("", e.toString());
                  }
                  slowestNanos.accumulateAndGet(System.nanoTime() - began, Math::max);
                  reads.incrementAndGet();
                }
              });
      reader.setDaemon(true);
      reader.start();
      threads.add(reader);
    }

    long began = System.nanoTime();
    Thread status =
        new Thread(
            () -> {
              while (true) {
                String seq;
                try {
                  seq = store.get("seq");
                } catch (RuntimeException e) {
                  seq = null;
                }
                System.out.printf(
                    "{\"ms\": %d, \"state\": \"%s\", \"reads\": %d, \"failed\": %d,"
                        + " \"slowest_ms\": %.1f, \"seq\": %s, \"error\": \"%s\"}%n",
                    (System.nanoTime() - began) / 1_000_000,
                    state.get(),
                    reads.get(),
                    failed.get(),
                    slowestNanos.get() / 1e6,
                    seq == null ? "null" : seq,
                    firstError.get().replace("\\", "/").replace("\"", "'"));
                System.out.flush();
                try {
                  Thread.sleep(500);
                } catch (InterruptedException e) {
                  return;
                }
              }
            });
    status.setDaemon(true);
    status.start();

    BufferedReader commands =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = commands.readLine(); line != null; line = commands.readLine()) {
      if (line.equals("dump")) {
        synchronized (System.out) {
          try (KeyValueIterator<String, String> all = store.all()) {
            while (all.hasNext()) {
              KeyValue<String, String> entry = all.next();
              System.out.println(entry.key + "\t" + entry.value);
            }
          }
          System.out.println("end");
          System.out.flush();
        }
      } else if (line.equals("stop")) {
        break;
      }
    }
    threads.forEach(Thread::interrupt);
    streams.close();
  }
}
