"""The development broker: a real single-node Apache Kafka (KRaft) run as a background JVM
from Kafka's own jars. Used by the CLI (`globalstore kafka ...`), the tests, the benchmarks
and the demo; not part of the store.

    broker.py  start, stop and inspect the JVM
    ports.py   free ports for it, and telling a start that lost its port
    jars.py    resolve Kafka's jars from Maven Central once, and cache them
    java.py    find a Java 17+ runtime
    errors.py  LocalKafkaError, the root of everything above can raise
"""

from globalstore.localkafka.broker import (
    ANY_PORT,
    DEFAULT_HEAP,
    DEFAULT_KAFKA_VERSION,
    DEFAULT_PORT,
    BrokerStatus,
    LocalKafka,
    default_data_dir,
)
from globalstore.localkafka.errors import (
    BrokerExitedError,
    JarResolutionError,
    JavaError,
    LocalKafkaError,
    PortInUseError,
)
from globalstore.localkafka.ports import free_port

__all__ = [
    "ANY_PORT",
    "DEFAULT_HEAP",
    "DEFAULT_KAFKA_VERSION",
    "DEFAULT_PORT",
    "BrokerExitedError",
    "BrokerStatus",
    "JarResolutionError",
    "JavaError",
    "LocalKafka",
    "LocalKafkaError",
    "PortInUseError",
    "default_data_dir",
    "free_port",
]
