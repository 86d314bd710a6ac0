"""lxml: a document parsed with a Python resolver, an XPath with a Python extension function, XSLT, and
iterparse events."""

import io
from typing import Any

MODULES = ("lxml.etree",)


def hook(module: Any) -> list[Any]:
    from lxml import etree

    class Resolver(etree.Resolver):  # type: ignore[misc]  # lxml ships no type information
        def resolve(self, url: str, public_id: str, context: Any) -> Any:
            return self.resolve_string("<x/>", context)

    parser = etree.XMLParser(load_dtd=False, resolve_entities=False)
    parser.resolvers.add(Resolver())
    root = etree.fromstring(b"<root><a n='1'/><a n='2'/></root>", parser)
    namespace = etree.FunctionNamespace("urn:lifeguard")
    namespace["twice"] = lambda context, value: [str(int(v) * 2) for v in value]
    doubled = root.xpath("l:twice(//a/@n)", namespaces={"l": "urn:lifeguard"})
    transform = etree.XSLT(etree.XML(b"<xsl:stylesheet version='1.0' xmlns:xsl='http://www.w3.org/1999/XSL/Transform'>"
                                     b"<xsl:template match='/'><out/></xsl:template></xsl:stylesheet>"))
    events = list(etree.iterparse(io.BytesIO(b"<r><c/></r>"), events=("start", "end")))
    return [parser, root, doubled, transform, transform(root), events]
