package org.attnrt;

/**
 * Loads the JNI library once: from the system property {@code org.attnrt.library} (a full path)
 * when set, else {@code libattnrt_jni.so} from {@code java.library.path}. The JNI library finds
 * libattnrt.so beside itself (rpath $ORIGIN), and libattnrt.so finds the plugins in attnrt/plugins
 * beside itself.
 */
final class NativeLibrary {
  private static boolean loaded;

  private NativeLibrary() {}

  static synchronized void load() {
    if (loaded) {
      return;
    }
    String path = System.getProperty("org.attnrt.library");
    if (path != null && !path.isEmpty()) {
      System.load(path);
    } else {
      System.loadLibrary("attnrt_jni");
    }
    loaded = true;
  }
}
