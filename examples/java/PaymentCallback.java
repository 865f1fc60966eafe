/*
 * A payment-provider webhook ("payment callback") handler, written the way a
 * Spring service would be: one @Transactional method that
 *
 *   1. claims the event id with idem_claim, in the same transaction as the
 *      business writes: a redelivered event is recognised and ignored, and
 *      if the transaction rolls back the claim goes with it;
 *   2. moves the order along a state machine (idem_can_transition), so that
 *      an event that arrives late never moves the order backwards;
 *   3. relies on idem_guard as the safety net: the orders table itself
 *      refuses an illegal status change (SQLSTATE ID004), whoever writes it.
 *
 * Spring is not needed to run it: the small Transactions class below does
 * what @Transactional / TransactionTemplate would do (commit on success,
 * roll back on any exception), and the queries are plain JDBC, exactly what
 * JdbcTemplate would run.
 *
 * Connection settings come from the standard libpq environment variables
 * (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD).  PGHOST may be a host
 * name or, as with libpq, a Unix-socket directory.  Needs Java 17 and the
 * PostgreSQL JDBC driver (Debian: libpostgresql-jdbc-java).  Run:
 *
 *   javac -d /tmp/pc examples/java/PaymentCallback.java
 *   PGDATABASE=mydb java -cp /tmp/pc:/usr/share/java/postgresql.jar PaymentCallback
 */

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.math.BigDecimal;
import java.net.InetAddress;
import java.net.Socket;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Callable;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

public final class PaymentCallback {

    /** What the payment provider POSTs to us. */
    record Callback(String eventId, String type, int orderId, BigDecimal amount) {
        /** The request as the provider describes it; a reused event id must match it. */
        String fingerprint() {
            return "{\"type\": \"" + type + "\", \"order\": " + orderId + ", \"amount\": " + amount + "}";
        }

        @Override
        public String toString() {
            return eventId + " " + type + " order " + orderId + " " + amount;
        }
    }

    /** What we answer; the provider redelivers on anything but 2xx. */
    record Response(int status, String message) {
        @Override
        public String toString() {
            return status + " " + message;
        }
    }

    /** Thrown to roll back and have the provider redeliver later. */
    static final class RetryLater extends Exception {
        private static final long serialVersionUID = 1L;

        RetryLater(String message) {
            super(message);
        }
    }

    // Run once per database; a real application does this in its migrations.
    static final String SETUP = """
        CREATE EXTENSION IF NOT EXISTS idempotency;
        SELECT idem_machine_define('shop_order', '{
            "initial": ["pending_payment"],
            "transitions": {
                "pending_payment": ["paid", "cancelled"],
                "paid": ["shipped", "refunded"],
                "shipped": ["delivered"]
            }}');
        CREATE TABLE IF NOT EXISTS shop_orders (
            id         int PRIMARY KEY,
            status     text NOT NULL,
            paid_total numeric(12,2) NOT NULL DEFAULT 0,
            version    int NOT NULL DEFAULT 0
        );
        CREATE TABLE IF NOT EXISTS payment_ledger (
            event_id text NOT NULL,
            order_id int NOT NULL REFERENCES shop_orders,
            amount   numeric(12,2) NOT NULL,
            at       timestamptz NOT NULL DEFAULT now()
        );
        -- The guard: every status change of shop_orders must follow the
        -- machine; version counts changes; history goes to idem_transition_log.
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_trigger
                            WHERE tgrelid = 'shop_orders'::regclass
                              AND tgfoid = 'idem_guard_trigger'::regproc) THEN
                PERFORM idem_guard('shop_orders', 'status', 'shop_order',
                                   version_column => 'version', history => true);
            END IF;
        END $$;
        INSERT INTO shop_orders (id, status) VALUES (42, 'pending_payment'), (43, 'pending_payment')
            ON CONFLICT DO NOTHING;
        """;

    // -----------------------------------------------------------------
    // The service.
    // -----------------------------------------------------------------

    static final class PaymentCallbackService {
        private final Transactions tx;

        PaymentCallbackService(Transactions tx) {
            this.tx = tx;
        }

        /** The controller: maps the outcome of the transaction to HTTP. */
        Response onCallback(Callback cb) {
            try {
                return new Response(200, tx.inTransaction(conn -> handle(conn, cb)));
            } catch (RetryLater e) {
                return new Response(409, "retry later: " + e.getMessage() + " (rolled back, claim included)");
            } catch (SQLException e) {
                if ("ID001".equals(e.getSQLState())) {
                    return new Response(422, "event id reused with a different payload (ID001)");
                }
                return new Response(500, "error " + e.getSQLState() + ": " + e.getMessage());
            } catch (Exception e) {
                return new Response(500, "error: " + e);
            }
        }

        // @Transactional(rollbackFor = Exception.class)
        String handle(Connection conn, Callback cb) throws SQLException, RetryLater {
            // 1. Exactly once per event id.  A concurrent delivery of the same
            //    event waits here until this transaction ends, then gets false.
            if (!claim(conn, cb)) {
                return "duplicate: already processed, ignored";
            }
            String target = switch (cb.type()) {
                case "payment.succeeded" -> "paid";
                case "payment.refunded" -> "refunded";
                default -> throw new IllegalArgumentException("unknown event type " + cb.type());
            };
            // 2. Lock the order and look at where it stands.
            String current = queryString(conn,
                "SELECT status FROM shop_orders WHERE id = ? FOR UPDATE", cb.orderId());
            if (current.equals(target)) {
                return "no-op: order " + cb.orderId() + " is already " + current;
            }
            if (!canTransition(conn, current, target)) {
                if (target.equals("refunded") && current.equals("pending_payment")) {
                    // The refund overtook the payment (providers do not promise
                    // order).  Rolling back releases the claim too, so the
                    // redelivery is processed normally once the payment is in.
                    throw new RetryLater("order " + cb.orderId() + " is " + current
                                         + ", the refund arrived before the payment");
                }
                // A late event: the order has moved on.  Acknowledge it (the
                // claim commits, so it is not processed again) and leave the
                // order where it is.
                return "stale: order " + cb.orderId() + " is " + current + ", not moving it back to " + target;
            }
            BigDecimal delta = target.equals("refunded") ? cb.amount().negate() : cb.amount();
            try (PreparedStatement ps = conn.prepareStatement(
                    "UPDATE shop_orders SET status = ?, paid_total = paid_total + ? WHERE id = ?")) {
                ps.setString(1, target);
                ps.setBigDecimal(2, delta);
                ps.setInt(3, cb.orderId());
                ps.executeUpdate();
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "INSERT INTO payment_ledger (event_id, order_id, amount) VALUES (?, ?, ?)")) {
                ps.setString(1, cb.eventId());
                ps.setInt(2, cb.orderId());
                ps.setBigDecimal(3, delta);
                ps.executeUpdate();
            }
            pause(300); // the rest of the business logic, in the same transaction
            return "processed: order " + cb.orderId() + " " + current + " -> " + target
                   + ", ledger " + delta.toPlainString();
        }

        private static boolean claim(Connection conn, Callback cb) throws SQLException {
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT idem_claim('payment-callback', ?, fingerprint => ?::jsonb::text)")) {
                ps.setString(1, cb.eventId());
                ps.setString(2, cb.fingerprint());
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    return rs.getBoolean(1);
                }
            }
        }

        private static boolean canTransition(Connection conn, String from, String to) throws SQLException {
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT idem_can_transition('shop_order', ?, ?)")) {
                ps.setString(1, from);
                ps.setString(2, to);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    return rs.getBoolean(1);
                }
            }
        }
    }

    // -----------------------------------------------------------------
    // What @Transactional does: one connection per call, commit on
    // success, roll back on any exception.
    // -----------------------------------------------------------------

    interface TxWork<T> {
        T run(Connection conn) throws Exception;
    }

    static final class Transactions {
        <T> T inTransaction(TxWork<T> work) throws Exception {
            try (Connection conn = connect()) {
                conn.setAutoCommit(false);
                try {
                    T result = work.run(conn);
                    conn.commit();
                    return result;
                } catch (Exception e) {
                    conn.rollback();
                    throw e;
                }
            }
        }
    }

    // -----------------------------------------------------------------
    // The story: the provider delivers callbacks late, twice, concurrently
    // and out of order.
    // -----------------------------------------------------------------

    public static void main(String[] args) throws Exception {
        try (Connection conn = connect(); Statement st = conn.createStatement()) {
            st.execute(SETUP);
        }
        PaymentCallbackService service = new PaymentCallbackService(new Transactions());
        BigDecimal hundred = new BigDecimal("100.00");
        Callback paid42 = new Callback("evt_A", "payment.succeeded", 42, hundred);

        System.out.println("1) The payment callback for order 42 arrives twice at the same moment, then once more.");
        deliverConcurrently(service, paid42, 2);
        deliver(service, paid42);

        System.out.println("2) The same event id comes back with a different amount.");
        deliver(service, new Callback("evt_A", "payment.succeeded", 42, new BigDecimal("999.00")));

        System.out.println("3) For order 43, the refund overtakes the payment.");
        Callback refund43 = new Callback("evt_C", "payment.refunded", 43, hundred);
        deliver(service, refund43);
        deliver(service, new Callback("evt_B", "payment.succeeded", 43, hundred));
        deliver(service, refund43); // the provider's redelivery

        System.out.println("4) A delayed 'payment.succeeded' with a new event id for the refunded order 43.");
        deliver(service, new Callback("evt_D", "payment.succeeded", 43, hundred));

        System.out.println("5) A bug elsewhere tries to move order 42 back to pending_payment.");
        try (Connection conn = connect(); Statement st = conn.createStatement()) {
            st.executeUpdate("UPDATE shop_orders SET status = 'pending_payment' WHERE id = 42");
            System.out.println("  the update went through: the guard is missing!");
        } catch (SQLException e) {
            System.out.println("  refused by the guard (" + e.getSQLState() + "): "
                               + e.getMessage().lines().findFirst().orElse(""));
        }

        System.out.println("Orders now:");
        try (Connection conn = connect(); Statement st = conn.createStatement();
             ResultSet rs = st.executeQuery(
                 "SELECT o.id, o.status, o.paid_total, o.version,"
                 + " (SELECT count(*) FROM payment_ledger l WHERE l.order_id = o.id)"
                 + " FROM shop_orders o WHERE o.id IN (42, 43) ORDER BY o.id")) {
            while (rs.next()) {
                System.out.printf("  order %d: %s, paid_total %s, version %d, %d ledger entries%n",
                                  rs.getInt(1), rs.getString(2), rs.getBigDecimal(3).toPlainString(),
                                  rs.getInt(4), rs.getLong(5));
            }
        }
    }

    static void deliver(PaymentCallbackService service, Callback cb) {
        System.out.println("  callback " + cb + " -> " + service.onCallback(cb));
    }

    static void deliverConcurrently(PaymentCallbackService service, Callback cb, int copies) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(copies);
        try {
            CyclicBarrier start = new CyclicBarrier(copies);
            List<Future<Response>> answers = new ArrayList<>();
            for (int i = 0; i < copies; i++) {
                Callable<Response> delivery = () -> {
                    start.await();
                    return service.onCallback(cb);
                };
                answers.add(pool.submit(delivery));
            }
            for (Future<Response> answer : answers) {
                System.out.println("  callback " + cb + " (concurrent) -> " + answer.get());
            }
        } finally {
            pool.shutdown();
        }
    }

    // -----------------------------------------------------------------
    // Plumbing.
    // -----------------------------------------------------------------

    static String queryString(Connection conn, String sql, int param) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            ps.setInt(1, param);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new SQLException("no row for " + param, "P0002");
                }
                return rs.getString(1);
            }
        }
    }

    static void pause(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static String env(String name, String fallback) {
        String value = System.getenv(name);
        return value == null || value.isEmpty() ? fallback : value;
    }

    /** A connection from PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD, as libpq would make it. */
    static Connection connect() throws SQLException {
        String host = env("PGHOST", "localhost");
        String port = env("PGPORT", "5432");
        String user = env("PGUSER", System.getProperty("user.name"));
        Properties props = new Properties();
        props.setProperty("user", user);
        String password = System.getenv("PGPASSWORD");
        if (password != null) {
            props.setProperty("password", password);
        }
        if (host.startsWith("/")) {
            // A Unix-socket directory: pgjdbc speaks TCP only, so hand it a
            // socket factory that connects to the server's socket file.
            props.setProperty("socketFactory", UnixSocketFactory.class.getName());
            props.setProperty("socketFactoryArg", host + "/.s.PGSQL." + port);
            props.setProperty("sslmode", "disable");
            host = "localhost";
        }
        String url = "jdbc:postgresql://" + host + ":" + port + "/" + env("PGDATABASE", user);
        return DriverManager.getConnection(url, props);
    }

    /** Unix-domain sockets for pgjdbc (Java 16+), used only when PGHOST is a directory. */
    public static final class UnixSocketFactory extends javax.net.SocketFactory {
        private final String path;

        public UnixSocketFactory(String path) {
            this.path = path;
        }

        @Override
        public Socket createSocket() {
            return new UnixSocket(path);
        }

        // The host and port pgjdbc passes are ignored: the socket file is the address.
        private Socket connected() throws IOException {
            Socket socket = createSocket();
            socket.connect(null);
            return socket;
        }

        @Override
        public Socket createSocket(String host, int port) throws IOException {
            return connected();
        }

        @Override
        public Socket createSocket(String host, int port, InetAddress localHost, int localPort) throws IOException {
            return connected();
        }

        @Override
        public Socket createSocket(InetAddress host, int port) throws IOException {
            return connected();
        }

        @Override
        public Socket createSocket(InetAddress address, int port, InetAddress localAddress, int localPort)
                throws IOException {
            return connected();
        }
    }

    /** A java.net.Socket over a Unix-domain SocketChannel; TCP options are ignored. */
    static final class UnixSocket extends Socket {
        private final String path;
        private SocketChannel channel;
        private InputStream in;
        private OutputStream out;
        private int timeout;

        UnixSocket(String path) {
            this.path = path;
        }

        @Override
        public void connect(SocketAddress ignored, int connectTimeout) throws IOException {
            channel = SocketChannel.open(UnixDomainSocketAddress.of(path));
            in = Channels.newInputStream(channel);
            out = Channels.newOutputStream(channel);
        }

        @Override
        public void connect(SocketAddress ignored) throws IOException {
            connect(ignored, 0);
        }

        @Override
        public InputStream getInputStream() throws IOException {
            if (in == null) {
                throw new IOException("not connected");
            }
            return in;
        }

        @Override
        public OutputStream getOutputStream() throws IOException {
            if (out == null) {
                throw new IOException("not connected");
            }
            return out;
        }

        @Override
        public boolean isConnected() {
            return channel != null && channel.isConnected();
        }

        @Override
        public boolean isClosed() {
            return channel != null && !channel.isOpen();
        }

        @Override
        public synchronized void close() throws IOException {
            if (channel != null) {
                channel.close();
            }
        }

        @Override
        public void shutdownInput() throws IOException {
            channel.shutdownInput();
        }

        @Override
        public void shutdownOutput() throws IOException {
            channel.shutdownOutput();
        }

        @Override
        public void setTcpNoDelay(boolean on) {
        }

        @Override
        public void setKeepAlive(boolean on) {
        }

        @Override
        public void setSendBufferSize(int size) {
        }

        @Override
        public void setReceiveBufferSize(int size) {
        }

        // Reads block; pgjdbc sets a read timeout only when socketTimeout is configured.
        @Override
        public synchronized void setSoTimeout(int millis) {
            timeout = millis;
        }

        @Override
        public synchronized int getSoTimeout() {
            return timeout;
        }

        @Override
        public String toString() {
            return "UnixSocket[" + path + "]";
        }
    }
}
