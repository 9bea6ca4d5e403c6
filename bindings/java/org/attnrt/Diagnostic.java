package org.attnrt;

/** A file skipped during plugin discovery, and why. */
public final class Diagnostic {
  /** The file. */
  public final String path;
  /** Why it was skipped. */
  public final String message;

  Diagnostic(String path, String message) {
    this.path = path;
    this.message = message;
  }

  @Override
  public String toString() {
    return path + ": " + message;
  }
}
