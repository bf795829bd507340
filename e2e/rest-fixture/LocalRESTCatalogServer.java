package org.apache.iceberg.rest;

import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.relocated.com.google.common.collect.Maps;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/**
 * Apache Iceberg's REST fixture, bound to 127.0.0.1 only (the stock main binds every
 * interface). Configured like RESTCatalogServer: CATALOG_* environment variables, with
 * CATALOG_REST_PORT for the port. Lives in the fixture's package to reach its
 * package-private catalog context.
 */
public class LocalRESTCatalogServer {
  public static void main(String[] args) throws Exception {
    Map<String, String> config = Maps.newHashMap(RCKUtils.environmentCatalogConfig());
    config.putIfAbsent("catalog-impl", JdbcCatalog.class.getName());
    config.putIfAbsent("uri", "jdbc:sqlite::memory:");
    config.putIfAbsent("jdbc.schema-version", "V1");
    int port = Integer.parseInt(config.getOrDefault("rest.port", "8181"));
    Catalog catalog =
        CatalogUtil.buildIcebergCatalog(
            config.getOrDefault("catalog.name", "rest_backend"), config, new Configuration());
    RESTCatalogServlet servlet =
        new RESTCatalogServlet(
            new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, config)));
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(servlet), "/*");
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost("127.0.0.1");
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.println("REST fixture listening on 127.0.0.1:" + port);
    server.join();
  }
}
