import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * Runs several mqadmin command lines (Apache's unmodified MQAdminStartup) in one JVM: one
 * command per stdin line, arguments separated by tabs. Around each command's output it prints
 * "@@BEGIN i" and "@@END i" on stdout (stderr joins stdout), so a test can check every
 * command's output on its own.
 */
public final class AdminBatch {
    public static void main(String[] args) throws Exception {
        System.setErr(System.out); // a command's stack trace belongs to its own section
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int i = 0;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            System.out.println("@@BEGIN " + i);
            System.out.flush();
            try {
                MQAdminStartup.main0(line.split("\t"), null);
            } catch (Throwable e) {
                System.out.println("@@THROWN " + e);
            }
            System.out.flush();
            System.err.flush();
            System.out.println("@@END " + i);
            System.out.flush();
            i++;
        }
        System.exit(0);
    }
}
