"""Extended queries (docs/extended-sparql.md) split into SPARQL 1.1 and extension parts: constructs, nesting, errors,
offsets."""

from __future__ import annotations

import doctest

import pyoxigraph
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparql_ext import (
    PLACEHOLDER,
    THEN_FUNCTION,
    ExtendedQuery,
    Head,
    Ordinal,
    QuadTemplate,
    QuerySyntaxError,
    extended,
    parse_extended,
    parse_window_ref,
)

RDF_TYPE = ("iri", "http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
XSD = "http://www.w3.org/2001/XMLSchema#"


def _accepted(query: str) -> None:
    """pyoxigraph (the parser of record) accepts the rewritten text."""
    then = {pyoxigraph.NamedNode(THEN_FUNCTION): lambda: pyoxigraph.Literal("2016-06-20T10:05:00Z")}
    pyoxigraph.Store().query(query, base_iri="http://base/", custom_functions=then)


def _placeholders_hold(q: ExtendedQuery) -> None:
    for part in q.parts:
        assert q.sparql[part.placeholder[0] : part.placeholder[1]] == PLACEHOLDER
        assert q.original_offset(part.placeholder[0]) == part.source_span[0]


# --- each construct alone -------------------------------------------------------------------------------------------

def test_windows_part() -> None:
    text = ("PREFIX prov: <http://www.w3.org/ns/prov#>\n"
            "SELECT ?t WHERE { ?s ?p ?o . WINDOWS R/HEAD/PT05M/PT01M { ?g prov:generatedAtTime ?t } }")
    q = parse_extended(text)
    assert q.sparql == ("PREFIX prov: <http://www.w3.org/ns/prov#>\n"
                        "SELECT ?t WHERE { ?s ?p ?o . VALUES () { () } }")
    [part] = q.parts
    assert (part.ident, part.kind, part.target, part.target_is_variable, part.silent) == (
        0, "windows", "R/HEAD/PT05M/PT01M", False, False)
    assert part.inner == ("PREFIX prov: <http://www.w3.org/ns/prov#>\n"
                          "SELECT * WHERE { ?g prov:generatedAtTime ?t }")
    assert part.inner_variables == ("?g", "?t")
    assert part.values_variables == ("?g", "?t")
    assert part.prefix == ""
    assert part.placeholder == (71, 87)
    assert text[part.source_span[0] : part.source_span[1]] == (
        "WINDOWS R/HEAD/PT05M/PT01M { ?g prov:generatedAtTime ?t }")
    assert text[part.inner_span[0] : part.inner_span[1]] == "{ ?g prov:generatedAtTime ?t }"
    assert part.designator == parse_window_ref("R/HEAD/PT05M/PT01M")
    assert not q.uses_then and q.template is None
    _placeholders_hold(q)
    _accepted(q.sparql)
    _accepted(part.inner)  # type: ignore[arg-type]


@pytest.mark.parametrize(("ref", "target"), [
    ("HEAD~9/HEAD", "HEAD~9/HEAD"),
    ("2016-06-20T10:00:00+01:00/PT05M", "2016-06-20T10:00:00+01:00/PT05M"),  # a raw '+' in a query
    ("HEAD/-PT05M", "HEAD/-PT05M"),
    ("R5/HEAD~9/HEAD/1  # the last ten, five times\n", "R5/HEAD~9/HEAD/1"),
])
def test_window_refs_are_token_sequences_up_to_the_group(ref: str, target: str) -> None:
    [part] = parse_extended(f"SELECT * {{ WINDOWS {ref} {{ ?s ?p ?o }} }}").parts
    assert part.target == target


@pytest.mark.parametrize(("revision", "target", "designator"), [
    ("HEAD", "HEAD", Head(0)),
    ("HEAD~2", "HEAD~2", Head(2)),
    ("3", "3", Ordinal(3)),
    ('"HEAD~1"', "HEAD~1", Head(1)),  # a String holding a revision
    ("'''7'''", "7", Ordinal(7)),
])
def test_revision_constant_forms(revision: str, target: str, designator: object) -> None:
    q = parse_extended(f"SELECT * WHERE {{ REVISION {revision} {{ ?s ?p ?o }} }}")
    assert q.sparql == "SELECT * WHERE { VALUES () { () } }"
    [part] = q.parts
    assert (part.kind, part.target, part.target_is_variable, part.designator) == ("revision", target, False, designator)
    assert part.inner == "SELECT * WHERE { ?s ?p ?o }"


def test_revision_by_uuid_and_datetime() -> None:
    q = parse_extended("SELECT * { REVISION b3e1c2d4-1111-4222-8333-944445555666 { ?a ?b ?c } "
                       "REVISION 2016-06-20T10:00:00Z { ?a ?b ?c } }")
    assert [p.target for p in q.parts] == ["b3e1c2d4-1111-4222-8333-944445555666", "2016-06-20T10:00:00Z"]
    assert [p.ident for p in q.parts] == [0, 1]
    assert q.sparql == "SELECT * { VALUES () { () } VALUES () { () } }"
    _placeholders_hold(q)


def test_revision_variable_bound_by_an_earlier_triple_pattern() -> None:
    text = ("PREFIX ex: <http://ex/>\n"
            "SELECT * WHERE {\n"
            "  ?commit ex:revision ?r ; ex:author ex:alice .\n"
            "  REVISION ?r { ?s ex:status ?status }\n"
            "  ?s ex:label ?label\n"
            "}")
    q = parse_extended(text)
    [part] = q.parts
    assert (part.target, part.target_is_variable) == ("?r", True)
    assert part.prefix == ("PREFIX ex: <http://ex/>\n"
                           "SELECT DISTINCT ?r WHERE {\n"
                           "  ?commit ex:revision ?r ; ex:author ex:alice .\n"
                           "  \n}")
    assert part.values_variables == ("?r", "?s", "?status")
    assert q.sparql == ("PREFIX ex: <http://ex/>\n"
                        "SELECT * WHERE {\n"
                        "  ?commit ex:revision ?r ; ex:author ex:alice .\n"
                        "  VALUES () { () }\n"
                        "  ?s ex:label ?label\n"
                        "}")
    _accepted(part.prefix)
    _accepted(q.sparql)


def test_service_constant_variable_silent_and_prefixed() -> None:
    text = ("BASE <http://host/>\nPREFIX st: <http://host/streams/>\n"
            "SELECT * FROM <http://host/base> WHERE {\n"
            "  SERVICE SILENT st:hr { ?a ?b ?c }\n"
            "  SERVICE <streams/bp?WINDOWS=R/HEAD/PT05M> { ?a ?d ?e }\n"
            "  ?a <http://host/feed> $feed .\n"
            "  SERVICE $feed { ?a ?f ?g }\n"
            "}")
    q = parse_extended(text)
    assert [(p.kind, p.target, p.target_is_variable, p.silent) for p in q.parts] == [
        ("service", "http://host/streams/hr", False, True),
        ("service", "http://host/streams/bp?WINDOWS=R/HEAD/PT05M", False, False),
        ("service", "?feed", True, False),
    ]
    # ?feed is bound without the earlier parts: they are left out (a superset of targets that reads only the
    # queried dataset, so it is cached per revision), the dataset clause stays
    assert q.parts[2].prefix == (
        "BASE <http://host/>\nPREFIX st: <http://host/streams/>\n"
        "SELECT DISTINCT ?feed FROM <http://host/base> WHERE {\n"
        "  \n"
        "  \n"
        "  ?a <http://host/feed> $feed .\n"
        "  \n}")
    assert parse_extended(q.parts[2].prefix).parts == ()
    assert q.parts[0].inner == ("BASE <http://host/>\nPREFIX st: <http://host/streams/>\n"
                                "SELECT * WHERE { ?a ?b ?c }")
    _placeholders_hold(q)
    _accepted(q.sparql)


def test_prefix_keeps_the_parts_the_target_needs() -> None:
    q = parse_extended("SELECT * { SERVICE <http://a/sparql> { ?s <urn:ep> ?ep } SERVICE ?ep { ?s ?p ?o } }")
    assert q.parts[1].prefix == "SELECT DISTINCT ?ep WHERE { SERVICE <http://a/sparql> { ?s <urn:ep> ?ep } \n}"
    assert len(parse_extended(q.parts[1].prefix).parts) == 1


def test_prefix_drops_filters_on_what_left_out_parts_bind_and_binds_computed_from_it() -> None:
    q = parse_extended("SELECT * { ?p <urn:feed> ?f ; <urn:min> ?min .\n"
                       "SERVICE <http://a/sparql> { ?p <urn:max> ?max }\n"
                       "BIND (?max * 2 AS ?twice) BIND (?twice + 1 AS ?more) FILTER (?more > ?min)\n"
                       "FILTER (?min > 0)\n"
                       "SERVICE ?f { ?p ?x ?y } }")
    prefix = q.parts[1].prefix
    assert "SERVICE <http://a/sparql>" not in prefix and "FILTER (?more > ?min)" not in prefix
    assert "FILTER (?min > 0)" in prefix  # static: kept
    assert "BIND (?max * 2 AS ?twice)" in prefix  # harmless: leaves ?twice unbound
    _accepted(prefix)


def test_service_variable_inside_graph_keeps_the_active_graph() -> None:
    q = parse_extended("SELECT * { GRAPH ?g { ?x <urn:s> ?svc . FILTER(?n > 1) SERVICE ?svc { ?x <urn:n> ?n } } }")
    # the FILTER needs ?n, which only the SERVICE binds: kept in the prefix it would reject every solution
    assert q.parts[0].prefix == "SELECT DISTINCT ?svc WHERE { GRAPH ?g { ?x <urn:s> ?svc .  \n}\n}"
    assert q.sparql == "SELECT * { GRAPH ?g { ?x <urn:s> ?svc . FILTER(?n > 1) VALUES () { () } } }"
    _accepted(q.parts[0].prefix)


def test_then_is_a_function_call() -> None:
    q = parse_extended("SELECT (then() AS ?t) WHERE { BIND(THEN ( ) AS ?u) }")
    assert q.sparql == ("SELECT (<urn:x-concentrator:fn:then>() AS ?t) "
                        "WHERE { BIND(<urn:x-concentrator:fn:then>() AS ?u) }")
    assert q.uses_then and q.parts == ()
    assert q.original_offset(q.sparql.index("AS ?t")) == q.original.index("AS ?t")
    assert q.original_offset(q.sparql.index("AS ?u")) == q.original.index("AS ?u")


def test_then_inside_windows_belongs_to_the_part() -> None:
    q = parse_extended("SELECT * { WINDOWS HEAD/-PT05M { ?g ?p ?o FILTER(?o < THEN()) } }")
    assert not q.uses_then
    [part] = q.parts
    assert isinstance(part.inner, ExtendedQuery)
    assert part.inner.original == "SELECT * WHERE { ?g ?p ?o FILTER(?o < THEN()) }"
    assert part.inner.sparql == "SELECT * WHERE { ?g ?p ?o FILTER(?o < <urn:x-concentrator:fn:then>()) }"
    assert part.inner.uses_then and part.inner.parts == ()
    assert part.inner_variables == ("?g", "?p", "?o")
    _accepted(part.inner.sparql)


# --- nesting --------------------------------------------------------------------------------------------------------

NESTED = """PREFIX ex: <http://ex/>
SELECT * WHERE {
  ex:patient ex:stream ?hr .
  REVISION HEAD~1 {
    ?sensor ex:feed ?feed .
    SERVICE ?feed {
      WINDOWS HEAD~9/HEAD { ?g ex:value ?v }
    }
  }
}"""


def test_nested_parts_are_parsed_recursively() -> None:
    q = parse_extended(NESTED)
    assert q.sparql == NESTED.replace(NESTED[NESTED.index("REVISION") : NESTED.rindex("}\n}") + 1], PLACEHOLDER)
    [revision] = q.parts
    assert (revision.kind, revision.target) == ("revision", "HEAD~1")
    assert revision.inner_variables == ("?sensor", "?feed", "?g", "?v")
    inner = revision.inner
    assert isinstance(inner, ExtendedQuery)
    assert inner.original.startswith("PREFIX ex: <http://ex/>\nSELECT * WHERE {\n    ?sensor ex:feed ?feed .\n")
    [service] = inner.parts
    assert (service.kind, service.target, service.target_is_variable) == ("service", "?feed", True)
    assert service.prefix == ("PREFIX ex: <http://ex/>\nSELECT DISTINCT ?feed WHERE {\n"
                              "    ?sensor ex:feed ?feed .\n    \n}")
    assert isinstance(service.inner, ExtendedQuery)
    [windows] = service.inner.parts
    assert (windows.kind, windows.target, windows.inner) == (
        "windows", "HEAD~9/HEAD", "PREFIX ex: <http://ex/>\nSELECT * WHERE { ?g ex:value ?v }")
    # positions in nested texts map back to the user's text, one level at a time
    at_v = windows.inner.index("?v")  # type: ignore[union-attr]
    user = revision.original_offset(service.original_offset(windows.original_offset(at_v)))
    assert user == NESTED.index("?v }")
    in_header = revision.original_offset(3)  # the repeated prologue maps to the part's keyword
    assert in_header == NESTED.index("REVISION")


def test_service_with_a_subselect_exposes_its_projection_only() -> None:
    q = parse_extended("SELECT * { ?s <urn:e> ?e SERVICE ?e { SELECT (AVG(?v) AS ?avg) ?k WHERE { ?x ?k ?v } "
                       "GROUP BY ?k } }")
    assert q.parts[0].values_variables == ("?e", "?avg", "?k")


# --- the connected-patient rule (examples/connected-patient) ---------------------------------------------------------

RULE = """PREFIX fhir: <http://hl7/org/fhir/>
PREFIX obs:  <http://hl7/org/fhir/Observation.>
PREFIX prov: <http://www.w3.org/ns/prov#>
PREFIX lr:   <http://localhost/local-records#>
CONSTRUCT {
  GRAPH ?elementID {
    ?obsID a <http://hl7/org/fhir/Observation> ; obs:subject ?patient ;
           obs:effectiveDateTime ?heartRate_time ;
           obs:code lr:AbnormallyHighHeartRate ;
           obs:valueCodeableConcept [ fhir:CodeableConcept.text 'yes' ] . }
  ?elementID prov:generatedAtTime ?generatedTime .
}
WHERE {
  BIND (<patient/@pat2> AS ?patient)
  ?patient lr:isConnectedTo ?heartRateSensor .
  ?heartRateSensor lr:hasStreamID ?heartRateStreamID ; a lr:HeartRateSensor .
  ?patient lr:isConnectedTo ?activitySensor .
  ?activitySensor lr:hasStreamID ?activityStreamID ; a lr:ActivitySensor .
  # --- missing from the seed: binds ?heartRate_base, ?patient_heartRate_std from the patient's
  # --- history, and ?maxEnergyExp from a window of the activity stream (a second SERVICE)
  ?patient fhir:Patient.birthDate ?birthdate .
  BIND ((YEAR(NOW()) - ?birthdate) AS ?age)
  VALUES (?ageLevel ?ageMin ?ageMax ?ageFactor) {
    (lr:elderly 70 120 0.7) (lr:midaged 30 70 1.0) (lr:young 0 30 1.3) }
  FILTER (?age >= ?ageMin && ?age < ?ageMax)
  VALUES (?activityLevel ?energyExpMin ?energyExpMax ?activityFactor) {
    (lr:high 25 100 2.0) (lr:medium 11 25 1.0) (lr:low 0 10 0.7) }
  FILTER (?maxEnergyExp >= ?energyExpMin * ?ageFactor && ?maxEnergyExp < ?energyExpMax * ?ageFactor)
  BIND (((1 + ?patient_heartRate_std) * ?activityFactor) AS ?relHeartRate_delta_threshold)
  BIND ((?heartRate_base * (1 + ?relHeartRate_delta_threshold)) AS ?heartRate_threshold)
  BIND (IRI(CONCAT(STR(?heartRateStreamID), '?WINDOWS=R/HEAD/PT05M/PT30S')) AS ?service_heartRate_ST)
  SERVICE ?service_heartRate_ST {
    SELECT (AVG(?heartRate) AS ?heartRate_avgST) (MAX(?heartRateTime) AS ?heartRate_time)
    WHERE { ?g prov:generatedAtTime ?gen .
            GRAPH ?g { [] a <http://hl7.org/fhir/Observation> ;
                          obs:effectiveDateTime ?heartRateTime ;
                          obs:valueQuantity [ fhir:Quantity.value ?heartRate ; fhir:Quantity.unit 'bpm' ] . } } }
  FILTER (?heartRate_avgST > ?heartRate_threshold)
  BIND (UUID() AS ?obsID) BIND (UUID() AS ?elementID) BIND (NOW() AS ?generatedTime)
}
"""
PROLOGUE = RULE[: RULE.index("CONSTRUCT")]
SERVICE_TEXT = RULE[RULE.index("SERVICE ?") : RULE.index("  FILTER (?heartRate_avgST") - 1]


def test_connected_patient_rule() -> None:
    q = parse_extended(RULE)
    template_text = RULE[RULE.index("CONSTRUCT") : RULE.index("WHERE {") - 1]
    assert q.sparql == RULE.replace(SERVICE_TEXT, PLACEHOLDER).replace(
        template_text, "SELECT ?elementID ?obsID ?patient ?heartRate_time ?generatedTime")
    [part] = q.parts
    assert (part.kind, part.target, part.target_is_variable, part.silent) == (
        "service", "?service_heartRate_ST", True, False)
    assert part.values_variables == ("?service_heartRate_ST", "?heartRate_avgST", "?heartRate_time")
    assert part.inner == PROLOGUE + "SELECT * WHERE " + SERVICE_TEXT.removeprefix("SERVICE ?service_heartRate_ST ")
    prefix = part.prefix
    assert prefix.startswith(PROLOGUE + "SELECT DISTINCT ?service_heartRate_ST WHERE {\n"
                             "  BIND (<patient/@pat2> AS ?patient)\n"
                             "  ?patient lr:isConnectedTo ?heartRateSensor .\n"
                             "  ?heartRateSensor lr:hasStreamID ?heartRateStreamID ; a lr:HeartRateSensor .\n")
    assert prefix.endswith("  BIND (IRI(CONCAT(STR(?heartRateStreamID), '?WINDOWS=R/HEAD/PT05M/PT30S'))"
                           " AS ?service_heartRate_ST)\n  \n}")
    assert "FILTER (?age >= ?ageMin && ?age < ?ageMax)" in prefix
    assert "?maxEnergyExp" not in prefix.split("(a second SERVICE)")[1]  # its FILTER needs the missing part
    assert "SERVICE ?" not in prefix and "?heartRate_avgST" not in prefix
    assert q.template == QuadTemplate(
        quads=(
            (("var", "obsID"), RDF_TYPE, ("iri", "http://hl7/org/fhir/Observation"), ("var", "elementID")),
            (("var", "obsID"), ("iri", "http://hl7/org/fhir/Observation.subject"), ("var", "patient"),
             ("var", "elementID")),
            (("var", "obsID"), ("iri", "http://hl7/org/fhir/Observation.effectiveDateTime"),
             ("var", "heartRate_time"), ("var", "elementID")),
            (("var", "obsID"), ("iri", "http://hl7/org/fhir/Observation.code"),
             ("iri", "http://localhost/local-records#AbnormallyHighHeartRate"), ("var", "elementID")),
            (("bnode", "t0"), ("iri", "http://hl7/org/fhir/CodeableConcept.text"), ("literal", '"yes"'),
             ("var", "elementID")),
            (("var", "obsID"), ("iri", "http://hl7/org/fhir/Observation.valueCodeableConcept"), ("bnode", "t0"),
             ("var", "elementID")),
            (("var", "elementID"), ("iri", "http://www.w3.org/ns/prov#generatedAtTime"), ("var", "generatedTime"),
             None),
        ),
        variables=("elementID", "obsID", "patient", "heartRate_time", "generatedTime"),
    )
    _placeholders_hold(q)
    for query in (q.sparql, part.prefix, part.inner):
        _accepted(query)  # type: ignore[arg-type]


# --- quad templates -------------------------------------------------------------------------------------------------

def test_quad_template_terms() -> None:
    text = """BASE <http://base/>
PREFIX ex: <http://ex/>
PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>
CONSTRUCT {
  GRAPH <g1> { ?s a ex:C , ex:D ; ex:n 5, -2.5, 1e3 ; ex:ok true ; ex:l "x\\"y"@en-GB, '''two
lines''' ; ex:t "7"^^xsd:int . }
  _:b ex:list ( 1 ?s ) .
  [] ex:p [ ex:q ex:r ] .
  GRAPH ?g { _:b ex:same ?s }
}
FROM <http://data/> WHERE { ?s ?p ?g } ORDER BY ?s LIMIT 5"""
    q = parse_extended(text)
    assert q.sparql == ("BASE <http://base/>\nPREFIX ex: <http://ex/>\nPREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n"
                        "SELECT ?s ?g\nFROM <http://data/> WHERE { ?s ?p ?g } ORDER BY ?s LIMIT 5")
    assert q.template is not None
    g1 = ("iri", "http://base/g1")
    s = ("var", "s")

    def ex(name: str) -> tuple[str, str]:
        return ("iri", f"http://ex/{name}")

    rdf = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
    assert q.template.quads == (
        (s, RDF_TYPE, ex("C"), g1),
        (s, RDF_TYPE, ex("D"), g1),
        (s, ex("n"), ("literal", f'"5"^^<{XSD}integer>'), g1),
        (s, ex("n"), ("literal", f'"-2.5"^^<{XSD}decimal>'), g1),
        (s, ex("n"), ("literal", f'"1e3"^^<{XSD}double>'), g1),
        (s, ex("ok"), ("literal", f'"true"^^<{XSD}boolean>'), g1),
        (s, ex("l"), ("literal", '"x\\"y"@en-GB'), g1),
        (s, ex("l"), ("literal", '"two\\nlines"'), g1),
        (s, ex("t"), ("literal", f'"7"^^<{XSD}int>'), g1),
        (("bnode", "t0"), ("iri", rdf + "first"), ("literal", f'"1"^^<{XSD}integer>'), None),
        (("bnode", "t0"), ("iri", rdf + "rest"), ("bnode", "t1"), None),
        (("bnode", "t1"), ("iri", rdf + "first"), s, None),
        (("bnode", "t1"), ("iri", rdf + "rest"), ("iri", rdf + "nil"), None),
        (("bnode", "b"), ex("list"), ("bnode", "t0"), None),
        (("bnode", "t3"), ex("q"), ex("r"), None),
        (("bnode", "t2"), ex("p"), ("bnode", "t3"), None),
        (("bnode", "b"), ex("same"), s, ("var", "g")),
    )
    assert q.template.variables == ("s", "g")
    _accepted(q.sparql)


def test_fresh_labels_avoid_the_users_labels() -> None:
    q = parse_extended("CONSTRUCT { GRAPH <urn:g> { _:t0 <urn:p> [] } } WHERE {}")
    assert q.template is not None
    assert q.template.quads == ((("bnode", "t0"), ("iri", "urn:p"), ("bnode", "t1"), ("iri", "urn:g")),)
    assert q.sparql == "SELECT * WHERE {}"


@pytest.mark.parametrize("text", [
    "CONSTRUCT { ?s <urn:p> ?o . [] <urn:q> ( 1 2 ) } WHERE { ?s ?p ?o }",
    "PREFIX ex: <http://ex/> CONSTRUCT WHERE { ?s ex:p ?o }",
    "CONSTRUCT { ?s <urn:graph> ?o } WHERE { GRAPH ?o { ?s ?p ?x } }",  # GRAPH in WHERE, not in the template
])
def test_standard_construct_is_unchanged(text: str) -> None:
    q = parse_extended(text)
    assert (q.sparql, q.template, q.parts, q.uses_then) == (text, None, (), False)


def test_construct_quad_template_with_parts_in_where() -> None:
    q = parse_extended("CONSTRUCT { GRAPH ?g { ?s ?p ?o } } WHERE { ?g ?x ?s WINDOWS HEAD { ?s ?p ?o } }")
    assert q.sparql == "SELECT ?g ?s ?p ?o WHERE { ?g ?x ?s VALUES () { () } }"
    assert q.parts[0].placeholder == (36, 52)
    assert q.original_offset(q.sparql.index("?x")) == q.original.index("?x")
    assert q.original_offset(3) == 0  # inside the rewritten template: where it began
    _placeholders_hold(q)


# --- keywords that are not extensions -------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    'SELECT * WHERE { ?s ?p "SERVICE <x> { ?a ?b ?c }" }',
    "SELECT * WHERE { ?s ?p '''WINDOWS HEAD { THEN() }''' }",
    "SELECT * WHERE { ?s <http://ex/REVISION> <http://ex/x?WINDOWS=HEAD> }",
    "PREFIX SERVICE: <http://ex/>\nSELECT * WHERE { ?s SERVICE:WINDOWS ?REVISION . ?s ?p $THEN }",
    "SELECT * WHERE { ?s ?p ?o # SERVICE <x> { ?a ?b ?c } WINDOWS HEAD {\n}",
    "# REVISION HEAD { \nASK { }",
])
def test_keywords_in_strings_iris_names_and_comments_are_not_parts(text: str) -> None:
    q = parse_extended(text)
    assert (q.sparql, q.parts, q.uses_then, q.template) == (text, (), False, None)


# --- errors at the user's line and column ---------------------------------------------------------------------------

def _error(text: str) -> QuerySyntaxError:
    with pytest.raises(QuerySyntaxError) as info:
        parse_extended(text)
    return info.value


def test_bad_window_ref_is_reported_where_it_is() -> None:
    error = _error("PREFIX ex: <http://ex/>\nSELECT * WHERE {\n  ?s ?p ?o . WINDOWS HEAD~/PT05M { ?a ?b ?c }\n}")
    assert (error.line, error.column) == (3, 22)
    assert error.message == ("Syntax error at line 3 column 22: WINDOWS=HEAD~/PT05M: 'HEAD~' is not a revision "
                             "(HEAD, HEAD~n, UUID, ordinal or xsd:dateTime with timezone)")


def test_errors_inside_nested_parts_map_to_the_users_text() -> None:
    error = _error("PREFIX ex: <http://ex/>\nSELECT * {\n  REVISION HEAD {\n    SERVICE ex:s {\n"
                   "      WINDOWS R0/HEAD/PT1M { ?a ?b ?c } } } }")
    assert (error.line, error.column) == (5, 15)
    assert "'R0' repeats zero times" in error.message
    error = _error("SELECT * {\n  REVISION HEAD {\n    SERVICE nope:s { ?a ?b ?c } } }")
    assert (error.line, error.column, error.message.split(": ", 1)[1]) == (3, 13, "prefix 'nope' is not declared")


@pytest.mark.parametrize(("text", "line", "column", "message"), [
    ("SELECT * {\n WINDOWS { ?s ?p ?o } }", 2, 2, "WINDOWS needs a WindowRef and a group pattern"),
    ("SELECT * {\n WINDOWS HEAD }", 2, 2, "WINDOWS needs a WindowRef and a group pattern"),
    ("SELECT * { REVISION { ?s ?p ?o } }", 1, 12, "REVISION needs a Var, a Revision or a String and a group pattern"),
    ("SELECT * { REVISION 'HEAD~x' { } }", 1, 21, "revision 'HEAD~x' is malformed: after HEAD only '~' and a "
                                                  "number of revisions may follow (e.g. HEAD~2)"),
    ("SELECT * { REVISION 2016-06-20T10:00:00 { } }", 1, 21, "revision '2016-06-20T10:00:00' is a dateTime without "
                                                             "a timezone; add 'Z' or an offset such as '+01:00' "
                                                             "(percent-encoded as %2B in a URL)"),
    ("SELECT * { SERVICE { } }", 1, 12, "SERVICE needs a Var or an IRI and a group pattern"),
    ("SELECT * { ?s ?p ?o .\n SERVICE ?x { } }", 2, 10, "?x must be bound by the patterns before SERVICE in its "
                                                       "group (SERVICE / REVISION with a variable is evaluated once "
                                                       "per value of it)"),
    ("SELECT * {\n  ?s ?p ?o\n", 1, 10, "'{' is never closed"),
    ("SELECT * { ?s ?p ?o } }", 1, 23, "unbalanced '}'"),
    ("SELECT * { ?s ?p ?o FILTER(?o < THEN) }", 1, 33, "THEN takes no arguments: write THEN()"),
    ("SELECT * { ?s ?p \x01 }", 1, 18, "unexpected character '\\x01'"),
    ("CONSTRUCT { GRAPH ?g { ?s ?p } } WHERE {}", 1, 30, "unexpected end of the CONSTRUCT template"),
    ("CONSTRUCT { GRAPH ?g { ?s ?p FILTER } } WHERE {}", 1, 30, "'FILTER' is not an RDF term or a variable"),
])
def test_syntax_errors(text: str, line: int, column: int, message: str) -> None:
    error = _error(text)
    assert (error.line, error.column, error.message.split(": ", 1)[1]) == (line, column, message)


def test_positions_in_the_rewritten_text_map_back() -> None:
    text = ("SELECT * WHERE {\n"
            "  SERVICE <http://example.org/streams/heart-rate?WINDOWS=R/HEAD/PT05M/PT30S> { ?s ?p ?o }\n"
            "  ?s <urn:p> ?o FILTER(?o > )\n"
            "}")
    q = parse_extended(text)
    bad = q.sparql.index(")\n}")  # where pyoxigraph would stop, in the shorter rewritten text
    assert bad != text.index(")\n}")
    assert q.original_offset(bad) == text.index(")\n}")
    error = q.syntax_error("expected an expression", bad)
    assert (error.line, error.column) == (3, 29)
    assert q.original_offset(len(q.sparql)) == len(text)


# --- without extensions nothing changes -----------------------------------------------------------------------------

_NAMES = st.sampled_from(["s", "p", "o", "SERVICE", "WINDOWS", "REVISION", "THEN", "x1"])
_TERMS = st.one_of(
    _NAMES.map(lambda n: f"?{n}"),
    _NAMES.map(lambda n: f"$v{n}"),
    _NAMES.map(lambda n: f"<http://ex/{n}?WINDOWS=HEAD~2>"),
    _NAMES.map(lambda n: f"ex:{n}"),
    st.sampled_from(['"SERVICE <x> { }"', "'WINDOWS HEAD { THEN() }'", '"""REVISION\n HEAD"""', "42", "-1.5e3",
                     "true", '"x"@en', '"1"^^ex:t', "_:b"]),
)
_SPACE = st.sampled_from([" ", "\n", "\t ", " # SERVICE <x> { } WINDOWS HEAD {\n"])


@st.composite
def _queries(draw: st.DrawFn) -> str:
    triples = draw(st.lists(st.tuples(_TERMS, _TERMS, _TERMS), min_size=0, max_size=5))
    sep = draw(_SPACE)
    body = sep.join(f"{s} {p} {o} ." for s, p, o in triples)
    if draw(st.booleans()):
        body = f"{body}{sep}OPTIONAL {{{sep}{body}{sep}}}"
    if draw(st.booleans()):
        body += f"{sep}FILTER(STRLEN(STR(?s)) > 2)"
    if draw(st.booleans()):
        body += f"{sep}GRAPH ?g {{ {body} }}"
    form = draw(st.sampled_from([
        "SELECT * WHERE {{{b}}}", "ASK {{{b}}}", "CONSTRUCT {{ ?s ?p ?o }} WHERE {{{b}}}",
        "CONSTRUCT WHERE {{{b}}}", "SELECT ?s WHERE {{ {{ SELECT ?s {{{b}}} }} }} LIMIT 3", "DESCRIBE ?s {{{b}}}",
    ]))
    return "PREFIX ex: <http://ex/>" + sep + form.format(b=f"{sep}{body}{sep}")


@settings(max_examples=200, deadline=None)
@given(_queries())
def test_queries_without_extensions_are_unchanged(text: str) -> None:
    q = parse_extended(text)
    assert (q.original, q.sparql, q.parts, q.uses_then, q.template, q.edits) == (text, text, (), False, None, ())
    assert q.original_offset(len(text) // 2) == len(text) // 2


def test_keywords_are_case_insensitive() -> None:
    q = parse_extended("select * { ?x <urn:s> $s . service silent $s { ?a ?b ?c } Revision HEAD~2 { ?a ?b ?c } "
                       "windows R/HEAD/PT05M { } }")
    assert q.sparql == "select * { ?x <urn:s> $s . VALUES () { () } VALUES () { () } VALUES () { () } }"
    assert [(p.kind, p.target, p.silent) for p in q.parts] == [
        ("service", "?s", True), ("revision", "HEAD~2", False), ("windows", "R/HEAD/PT05M", False)]
    assert q.parts[0].prefix == "SELECT DISTINCT ?s WHERE { ?x <urn:s> $s . \n}"


def test_docstring_examples() -> None:
    result = doctest.testmod(extended)
    assert result.failed == 0 and result.attempted > 0


_W = "SERVICE <http://x/streams/s?WINDOWS=R/HEAD/PT10S> { SELECT (AVG(?v) AS ?avg) WHERE { ?o <urn:v> ?v } }"


@pytest.mark.parametrize("query, reads", [
    # only the window's table, FILTER, BIND, VALUES: any store gives the answer
    (f"CONSTRUCT {{ <urn:w> <urn:avg> ?avg }} WHERE {{ {_W} FILTER (?avg > 10) BIND (STR(?avg) AS ?s) }}", False),
    (f"CONSTRUCT {{ <urn:w> <urn:avg> ?avg }} WHERE {{ {_W} . FILTER regex(STR(?avg), '1') }}", False),
    (f"CONSTRUCT {{ <urn:w> <urn:k> ?k }} WHERE {{ VALUES ?k {{ 1 2 }} VALUES (?a ?b) {{ (1 2) }} {_W} }}", False),
    (f"SELECT ?avg WHERE {{ {_W} }} ORDER BY ?avg", False),
    (f"ASK {{ {_W} FILTER (THEN() > '2016-01-01T00:00:00Z'^^<http://www.w3.org/2001/XMLSchema#dateTime>) }}", False),
    # a pattern against the dataset, or an expression reading it
    (f"CONSTRUCT {{ ?p <urn:avg> ?avg }} WHERE {{ {_W} ?p <urn:limit> ?l FILTER (?avg > ?l) }}", True),
    (f"CONSTRUCT {{ <urn:w> <urn:avg> ?avg }} WHERE {{ {_W} FILTER NOT EXISTS {{ <urn:w> ?p ?o }} }}", True),
    (f"CONSTRUCT {{ <urn:w> <urn:avg> ?avg }} WHERE {{ {_W} BIND (EXISTS {{ ?s ?p ?o }} AS ?e) }}", True),
    (f"CONSTRUCT {{ <urn:w> <urn:avg> ?avg }} WHERE {{ {_W} OPTIONAL {{ <urn:w> <urn:p> ?o }} }}", True),
    (f"CONSTRUCT {{ <urn:w> <urn:avg> ?avg }} WHERE {{ {_W} GRAPH ?g {{ }} }}", True),
    (f"CONSTRUCT {{ <urn:w> <urn:avg> ?avg }} WHERE {{ {_W} {{ SELECT ?x {{ ?x ?p ?o }} }} }}", True),
    ("CONSTRUCT WHERE { ?s ?p ?o }", True),
    ("DESCRIBE <urn:w>", True),
    (f"SELECT ?avg WHERE {{ {_W} }} GROUP BY ?avg HAVING (EXISTS {{ ?s ?p ?o }})", True),
])
def test_whether_the_main_query_reads_its_dataset(query: str, reads: bool) -> None:
    """Rules over a window's aggregate run their main query on an empty store when it reads no data (hand-decided
    cases: a triple pattern, GRAPH, OPTIONAL, a sub-select, EXISTS read it; the parts' tables, FILTER, BIND and VALUES
    do not)."""
    assert parse_extended(query).reads_data is reads
