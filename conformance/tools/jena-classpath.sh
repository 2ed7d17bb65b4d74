#!/bin/sh
# Origin: the project's shared tools folder (shared/tools/jena-classpath.sh, written for this project's
# client tests), copied here unchanged below this note so that a clone runs Jena without it.
# Use: java -cp "$(sh conformance/tools/jena-classpath.sh)" arq.sparql --query q.rq
# Prints a Java classpath for Debian's libapache-jena-java 4.5.0 jars.
# Debian ships no arq/sparql/riot wrapper scripts and no manifest Class-Path,
# so the dependency jars are listed by hand. Debian's jena-core.jar also has
# its shaded Xerces classes relocated to package "xerces.*" while the resource
# bundles stayed under org/apache/jena/ext/xerces/, which makes JenaSystem.init
# fail with RuntimeException("internal error") in XSSimpleTypeDecl.applyFacets1.
# Work-around: extract those .properties files once into $FIX under xerces/ and
# put $FIX first on the classpath.
J=/usr/share/java
FIX=${JENA_FIX_DIR:-$(python3 -c "import tempfile;print(tempfile.gettempdir())")/jena-fix}
if [ ! -f "$FIX/xerces/impl/xpath/regex/message.properties" ]; then
  T=$(mktemp -d)
  (cd "$T" && unzip -q -o $J/jena-core.jar 'org/apache/jena/ext/xerces/*.properties')
  mkdir -p "$FIX"
  cp -r "$T/org/apache/jena/ext/xerces" "$FIX/"
  rm -rf "$T"
fi
CP="$FIX"
for j in jena-cmds jena-arq jena-core jena-base jena-iri jena-rdfconnection jena-tdb jena-tdb2 \
         jena-dboe-base jena-dboe-index jena-dboe-storage jena-dboe-trans-data jena-dboe-transaction \
         jena-shacl jena-shex \
         commons-lang3 commons-io commons-codec commons-compress commons-csv commons-cli \
         dexx.collection guava gson jsonld-java httpclient httpcore httpclient-cache \
         jackson-core jackson-databind jackson-annotations titanium-json-ld jakarta.json-api \
         protobuf thrift slf4j-api slf4j-simple jcl-over-slf4j; do
  CP="$CP:$J/$j.jar"
done
echo "$CP"
