package org.attnrt;

import java.util.List;
import java.util.Map;

/** A loaded plugin: where it came from, whether its probe says it can run here, its facts and kernels. */
public final class PluginInfo {
  /** Plugin name, e.g. "cpu_x86". */
  public final String name;
  /** The shared library it was loaded from. */
  public final String path;
  /** The plugin's own version. */
  public final String version;
  /** ABI major version the plugin was built with. */
  public final int abiMajor;
  /** ABI minor version the plugin was built with. */
  public final int abiMinor;
  /** True when the probe says the plugin can run on this machine. */
  public final boolean available;
  /** Why it is unavailable ("" when available). */
  public final String reason;
  /** Probe facts (ISA, cache sizes, devices), in the plugin's order. */
  public final Map<String, String> facts;
  /** Its kernels in rank order. */
  public final List<KernelInfo> kernels;

  PluginInfo(String name, String path, String version, int abiMajor, int abiMinor, boolean available,
      String reason, Map<String, String> facts, List<KernelInfo> kernels) {
    this.name = name;
    this.path = path;
    this.version = version;
    this.abiMajor = abiMajor;
    this.abiMinor = abiMinor;
    this.available = available;
    this.reason = reason;
    this.facts = java.util.Collections.unmodifiableMap(facts);
    this.kernels = java.util.Collections.unmodifiableList(kernels);
  }

  @Override
  public String toString() {
    return name + " " + version + " (" + path + ")";
  }
}
