package htam.neo4jserver;

import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Stream;
import org.neo4j.cli.ExecutionContext;
import org.neo4j.commandline.admin.security.SetInitialPasswordCommand;
import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.harness.Neo4j;
import org.neo4j.harness.Neo4jBuilders;
import org.neo4j.io.ByteUnit;
import org.neo4j.io.fs.DefaultFileSystemAbstraction;
import org.neo4j.server.configuration.ServerSettings;
import picocli.CommandLine;

/**
 * A Neo4j 5 server for htam-graph's tests and demos, in this JVM through neo4j-harness.
 *
 * <p>Loopback only, Bolt and HTTP on free ports (or the ports given), authentication on (user {@code neo4j}, the
 * password from {@code --password} or the environment variable {@code HTAM_NEO4J_PASSWORD}), APOC core
 * registered from the plugins folder with file import enabled from the import folder, Neo4j Browser at
 * {@code /browser/} of the HTTP connector. When the database is up it prints one line
 * {@code READY bolt=bolt://127.0.0.1:P http=http://127.0.0.1:Q/ import=DIR} on stdout; SIGTERM (or Ctrl-C) shuts
 * it down through a shutdown hook. The store lives in {@code DATA/data} and is wiped at every start (a fresh,
 * empty database, whose user neo4j has the given password from its first moment).
 *
 * <p>Usage: {@code java -Xmx1g -jar htam-neo4j-server.jar --data DIR [--password PW] [--import-dir DIR]
 * [--plugins DIR] [--bolt-port N] [--http-port N]}.
 */
public final class TestServer {
    private static final String USER = "neo4j";
    private static final String HOST = "127.0.0.1";
    private static final int MIN_PASSWORD = 8; // Neo4j's dbms.security.auth_minimum_password_length default

    private TestServer() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = parse(args);
        Path data = Paths.get(required(opts, "data")).toAbsolutePath();
        String password = opts.getOrDefault("password", System.getenv("HTAM_NEO4J_PASSWORD"));
        if (password == null || password.length() < MIN_PASSWORD) {
            fail("a password of at least " + MIN_PASSWORD + " characters is needed: --password or HTAM_NEO4J_PASSWORD");
        }
        Path importDir = Paths.get(opts.getOrDefault("import-dir", data.resolve("import").toString())).toAbsolutePath();
        Path plugins = opts.containsKey("plugins") ? Paths.get(opts.get("plugins")).toAbsolutePath() : defaultPlugins();
        int boltPort = Integer.parseInt(opts.getOrDefault("bolt-port", "0"));
        int httpPort = Integer.parseInt(opts.getOrDefault("http-port", "0"));
        Files.createDirectories(data);
        Files.createDirectories(importDir);
        if (!Files.isDirectory(plugins)) {
            fail("no plugins folder at " + plugins + " (build with: mvn package)");
        }

        Path store = data.resolve("data");
        deleteTree(store); // a fresh database every start: the initial password only applies to a new store
        setInitialPassword(data, password);

        // APOC's settings: the environment first, then system properties, then apoc.conf (there is none here).
        System.setProperty("apoc.import.file.enabled", "true");
        System.setProperty("apoc.export.file.enabled", "true");

        Neo4j neo4j = Neo4jBuilders.newInProcessBuilder(data)
                .withConfig(BoltConnector.enabled, true)
                .withConfig(BoltConnector.listen_address, new SocketAddress(HOST, boltPort))
                .withConfig(BoltConnector.advertised_address, new SocketAddress(HOST, boltPort))
                .withConfig(HttpConnector.enabled, true)
                .withConfig(HttpConnector.listen_address, new SocketAddress(HOST, httpPort))
                .withConfig(HttpConnector.advertised_address, new SocketAddress(HOST, httpPort))
                .withConfig(GraphDatabaseSettings.auth_enabled, true)
                .withConfig(GraphDatabaseSettings.data_directory, store)
                .withConfig(GraphDatabaseSettings.plugin_dir, plugins)
                .withConfig(GraphDatabaseSettings.load_csv_file_url_root, importDir)
                .withConfig(GraphDatabaseSettings.procedure_unrestricted, List.of("apoc.*"))
                .withConfig(GraphDatabaseSettings.pagecache_memory, ByteUnit.mebiBytes(64))
                // offline: no usage reports from the server, no telemetry consent banner in the Browser
                .withConfig(GraphDatabaseSettings.udc_enabled, false)
                .withConfig(ServerSettings.allow_telemetry, false)
                .build();
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                neo4j.close();
            } finally {
                stopped.countDown();
            }
        }, "htam-neo4j-shutdown"));

        System.out.println("READY bolt=" + uri(neo4j.boltURI(), "bolt") + " http=" + uri(neo4j.httpURI(), "http")
                + "/ import=" + importDir);
        System.out.flush();
        stopped.await();
    }

    /**
     * What {@code neo4j-admin dbms set-initial-password} does: writes {@code HOME/data/dbms/auth.ini}, which the
     * new store takes as user neo4j's password, so Bolt never accepts the default neo4j/neo4j.
     */
    private static void setInitialPassword(Path home, String password) {
        ExecutionContext context = new ExecutionContext(home, home.resolve("conf"), System.err, System.err,
                new DefaultFileSystemAbstraction());
        int rc = new CommandLine(new SetInitialPasswordCommand(context)).execute("--", password); // "--": a password may start with a dash
        if (rc != 0) {
            fail("could not set the initial password (exit " + rc + ")");
        }
    }

    private static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> paths = Files.walk(root)) {
            for (Path path : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(path);
            }
        }
    }

    /** bolt://127.0.0.1:PORT, whatever host name the harness reports. */
    private static String uri(java.net.URI reported, String scheme) {
        return scheme + "://" + HOST + ":" + reported.getPort();
    }

    /** target/plugins next to target/htam-neo4j-server.jar. */
    private static Path defaultPlugins() throws URISyntaxException {
        Path jar = Paths.get(TestServer.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        return jar.getParent().resolve("plugins");
    }

    private static Map<String, String> parse(String[] args) {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (!arg.startsWith("--") || i + 1 >= args.length) {
                fail("bad argument " + arg + " (options: --data DIR --password PW --import-dir DIR --plugins DIR"
                        + " --bolt-port N --http-port N)");
            }
            opts.put(arg.substring(2), args[++i]);
        }
        return opts;
    }

    private static String required(Map<String, String> opts, String name) {
        String value = opts.get(name);
        if (value == null) {
            fail("--" + name + " is required");
        }
        return value;
    }

    private static void fail(String message) {
        System.err.println("htam-neo4j-server: " + message);
        System.exit(2);
    }
}
