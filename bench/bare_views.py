"""The baseline: what the cheapest possible 'store this JSON' costs on the same server.

Both parse the JSON body like the ask does; one INSERTs one row, the other 100 rows in one
statement. No auth, no validation: the ratio shows what the real ask adds on top."""

import json

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from holds.services.gateway import driver_cursor

TABLE = "CREATE TABLE IF NOT EXISTS bench_bare (id bigserial PRIMARY KEY, body text NOT NULL)"


@csrf_exempt
def bare_insert(request):
    body = json.loads(request.body)
    with driver_cursor() as cursor:
        cursor.execute("INSERT INTO bench_bare (body) VALUES (%s) RETURNING id", [json.dumps(body)])
        row_id = cursor.fetchone()[0]
    return JsonResponse({"id": row_id}, status=201)


@csrf_exempt
def bare_bulk(request):
    body = json.loads(request.body)
    rows = [json.dumps(item) for item in body["items"]]
    with driver_cursor() as cursor:
        cursor.execute("INSERT INTO bench_bare (body) SELECT * FROM unnest(%s::text[])", [rows])
    return JsonResponse({"rows": len(rows)}, status=201)
