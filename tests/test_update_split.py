from __future__ import annotations

import pytest

from sparql_ext import DEFAULT_GRAPH, ProtocolConflict, QuerySyntaxError, split_update

PROLOGUE = "PREFIX ex: <http://ex/>\n"


def test_operations_and_their_graphs() -> None:
    ops = split_update(PROLOGUE + """
        CLEAR GRAPH ex:a ;
        INSERT DATA { ex:s ex:p 1 . GRAPH <b> { ex:s ex:p 2 } } ;
        DELETE WHERE { GRAPH ?g { ?s ex:p ?o } } ;
        WITH ex:w DELETE { ?s ?p ?o } INSERT { GRAPH ex:c { ?s ?p ?o } } WHERE { ?s ?p ?o } ;
        COPY DEFAULT TO ex:d ;
        DROP ALL""", base_iri="http://base/")
    assert [op.kind for op in ops] == [
        "CLEAR", "INSERT DATA", "DELETE WHERE", "MODIFY", "COPY", "DROP"]
    assert ops[0].graphs == {"http://ex/a"}
    assert ops[1].graphs == {DEFAULT_GRAPH, "http://base/b"}  # relative IRI resolved
    assert ops[2].graph_vars == ("g",) and ops[2].graphs == frozenset()
    assert ops[2].where is not None and "SELECT DISTINCT ?g" in ops[2].where
    assert ops[3].graphs == {"http://ex/w", "http://ex/c"}  # WITH names the template graph
    assert ops[3].using == ("http://ex/w",)  # … and the WHERE clause's default graph
    assert ops[4].graphs == {DEFAULT_GRAPH, "http://ex/d"}
    assert ops[5].all_named and DEFAULT_GRAPH in ops[5].graphs
    assert all(op.text.startswith("PREFIX ex:") for op in ops)  # each runs on its own


def test_protocol_using_parameters_become_using_clauses() -> None:
    [op] = split_update("INSERT { ?s a <T> } WHERE { ?s a <D> }",
                        using=["http://g1"], using_named=["http://g2"])
    assert "USING <http://g1> USING NAMED <http://g2>\nWHERE" in op.text
    assert op.using == ("http://g1",) and op.using_named == ("http://g2",)


def test_delete_where_with_protocol_dataset_is_spelled_out() -> None:
    [op] = split_update("DELETE WHERE { ?s ?p ?o }", using=["http://g1"])
    assert op.text.strip() == "DELETE { ?s ?p ?o }\nUSING <http://g1>\nWHERE { ?s ?p ?o }"


@pytest.mark.parametrize("update", [
    "WITH <http://w> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
    "DELETE { ?s ?p ?o } USING <http://u> WHERE { ?s ?p ?o }",
])
def test_using_parameters_conflict_with_using_or_with(update: str) -> None:
    with pytest.raises(ProtocolConflict, match="USING or WITH"):
        split_update(update, using_named=["http://people"])


def test_syntax_errors_point_into_the_users_text() -> None:
    with pytest.raises(QuerySyntaxError) as info:
        split_update("CLEAR ALL ;\nINSERT DATA { <a> <b> <c> ")
    assert (info.value.line, info.value.column) == (2, 13)
    with pytest.raises(QuerySyntaxError, match="prefix 'nope' is not declared"):
        split_update("CLEAR GRAPH nope:x")


def test_semicolons_and_keywords_inside_strings_and_blocks_do_not_split() -> None:
    ops = split_update('INSERT DATA { <a> <b> "x ; DROP ALL" ; <c> "}" }')
    assert len(ops) == 1 and ops[0].kind == "INSERT DATA"
